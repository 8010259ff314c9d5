"""The one shape of lifecore's state machines: how each is built, bound, run and counted.

Every lifecycle's machine (:class:`~lifecore.testing.StreamCaptureMachine`,
:class:`~lifecore.testing.SequenceSessionMachine`, :class:`~lifecore.testing.CaptureSessionMachine`)
is a :class:`LifecycleMachine`:

- its first argument is a factory of the thing under test (a device, an admission
  coordinator, a capture backend), or it takes the one :meth:`~LifecycleMachine.bind` gave
  its class (``Machine.bind(factory).TestCase`` is a unittest case);
- :meth:`~LifecycleMachine.run` runs it (``seed`` makes the run reproducible: the same seed
  executes the same steps);
- its rules are :func:`counted` in the lifecycle's one :class:`MachineStats` (``Machine.stats``);
- each operation goes through :meth:`~LifecycleMachine.both`: the model and lifecore must
  agree on the outcome's kind and on the fields the lifecycle declares (``compared_fields``).
"""

from __future__ import annotations

from .. import _python_guard

import inspect
import sys
import time
import unittest
from typing import Any, Callable, ClassVar, Optional, Sequence, Self, cast

from hypothesis import HealthCheck, seed as hypothesis_seed, settings as Settings
from hypothesis import stateful as _stateful
from hypothesis.errors import Flaky, HypothesisException
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

# The attribute Hypothesis's @initialize sets on a rule (not exported; the same name since 3.x).
INITIALIZE_RULE_MARKER: str = getattr(_stateful, "INITIALIZE_RULE_MARKER", "hypothesis_stateful_initialize_rule")

from ..errors import BackendUnavailableError, LifecoreTypeError
from .contract import Agreement, both
from .machine_stats import MachineStats
from .required import requirement_note

__all__ = ["LifecycleMachine", "clean_up", "counted", "run_machine", "same"]


# The steps of the first run in which a rule raised, and what it raised, since run_machine began
# (see run_machine: kept for a run that Hypothesis cannot replay).
_first_failure: list[tuple[list[str], str]] = []


def _shown(value: Any) -> str:
    try:
        return repr(value)
    except Exception as error:  # noqa: BLE001 - a failing repr must not hide the rule's own error
        return f"<{type(value).__name__}: repr raised {type(error).__name__}>"


def same(actual: Any, expected: Any) -> None:
    """``assert actual == expected`` that says both values when it fails: a machine runs outside
    pytest (``lifecore fuzz``, a user's own run), where a bare assert reports no values. The
    failure's source line (``lifecore fuzz`` prints it) names what was compared."""
    if not actual == expected:
        raise AssertionError(f"{_shown(actual)} != {_shown(expected)}")


def _step_text(rule: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    shown = [_shown(a) for a in args] + [f"{k}={_shown(v)}" for k, v in kwargs.items()]
    return f"{rule}({', '.join(shown)})"


def check_run_arguments(call: str, settings: Any, seed: Any) -> None:
    """LifecoreTypeError, naming ``call`` and the argument, for a ``settings`` that is not a
    Hypothesis ``settings`` or a ``seed`` that is not an int (checked before anything runs)."""
    if settings is not None and not isinstance(settings, Settings):
        raise LifecoreTypeError(f"{call}: argument 'settings' must be a hypothesis.settings or None, "
                                f"got {type(settings).__name__}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise LifecoreTypeError(f"{call}: argument 'seed' must be an int or None, got {type(seed).__name__}")


def check_factory(call: str, factory: Any, optional: bool) -> None:
    """LifecoreTypeError, naming ``call``, for a factory that cannot be called."""
    if factory is None and optional:
        return
    if not callable(factory):
        raise LifecoreTypeError(f"{call}: argument 'factory' must be a callable that makes the thing under test"
                                f"{' (or None)' if optional else ''}, got {type(factory).__name__}")


def run_machine(make: Callable[[], RuleBasedStateMachine], *, settings: Optional[Settings] = None,
                seed: Optional[int] = None) -> None:
    """Runs the machines ``make`` builds as one Hypothesis test: raises the failure it finds,
    after shrinking it (under settings that report multiple bugs, Hypothesis's default, several
    distinct failures come as one ExceptionGroup; ``lifecore fuzz`` reports one). Hypothesis
    keeps its cache where it always does (``.hypothesis/`` in the current folder, which it
    git-ignores; ``HYPOTHESIS_STORAGE_DIRECTORY`` moves it; ``lifecore fuzz`` uses a temporary
    folder).

    With a ``seed`` the run is reproducible: the same seed and settings execute the same steps.
    Such a run never reads the example database (examples stored by an earlier failure would
    run first, a different workload). LifecoreTypeError for a ``make`` that cannot be called, a
    ``settings`` that is not a Hypothesis ``settings``, or a ``seed`` that is not an int."""
    if not callable(make):
        raise LifecoreTypeError(f"run_machine: argument 'make' must be a callable that makes a machine, "
                                f"got {type(make).__name__}")
    check_run_arguments("run_machine", settings, seed)
    if seed is not None:
        base = settings if settings is not None else Settings(deadline=None, suppress_health_check=list(HealthCheck))
        settings = Settings(base, database=None)

        unseeded = make

        def seeded() -> RuleBasedStateMachine:
            return unseeded()

        make = hypothesis_seed(seed)(seeded)
    outer = list(_first_failure)  # a run_machine inside a rule keeps the outer run's
    _first_failure.clear()
    try:
        # Hypothesis calls the factory it is given; recent releases annotate it as the class itself.
        run_state_machine_as_test(cast(Any, make), settings=settings)
    except Flaky as error:
        # Hypothesis replays a failing run to report it; where the replay behaves otherwise (a
        # device's timing decided the failure) it reports only that, and the run that failed is
        # lost. The machine kept its steps: they go with the error.
        if _first_failure:
            steps, raised = _first_failure[0]
            error.add_note("The run that failed first, as the machine ran it (the replay behaved otherwise):\n"
                           + "\n".join(f"  {step}" for step in steps) + f"\n  -> {raised}")
        raise
    finally:
        _first_failure[:] = outer


def counted(body: Callable[..., Any]) -> Callable[..., Any]:
    """Counts a rule in its machine's stats (apply it below ``@rule``, so Hypothesis sees the
    wrapper). A rule called from another rule is part of that step, not a step of its own."""

    def step(self: "LifecycleMachine", *args: Any, **kwargs: Any) -> Any:
        if self._in_rule:
            return body(self, *args, **kwargs)
        stats = type(self).stats
        stats.step(body.__name__, dict(zip(("#" + str(i) for i in range(len(args))), args), **kwargs))
        self._history.append((body.__name__, args, kwargs))
        start = time.perf_counter()
        self._in_rule = True
        try:
            result = body(self, *args, **kwargs)
            self.after_step()
            return result
        except Exception as error:
            # Hypothesis's own control flow (an assumption, a run cut short) is not a failure.
            if not isinstance(error, HypothesisException):
                self._step_failed = True
                if not _first_failure:
                    _first_failure.append(([_step_text(*step) for step in self._history],
                                           f"{type(error).__name__}: {error}"))
            raise
        finally:
            self._in_rule = False
            stats.rule_seconds += time.perf_counter() - start

    step.__name__, step.__doc__, step.__qualname__ = body.__name__, body.__doc__, body.__qualname__
    return step


def clean_up(action: Callable[[], Any], check: bool) -> None:
    """Runs one of a teardown's clean-ups. With ``check`` what it raises is the run's failure;
    without it (after a failed step: see :meth:`LifecycleMachine.run_failed`) it is dropped, so
    the step's own error is the one reported and every other clean-up still runs."""
    if check:
        action()
        return
    try:
        action()
    except Exception:  # noqa: BLE001 - after a failed step; its error is the one reported
        pass


class LifecycleMachine(RuleBasedStateMachine):
    """The base of every lifecycle's state machine (see the module's documentation)."""

    #: The lifecycle's statistics (one per lifecycle, shared by its machines).
    stats: ClassVar[MachineStats] = MachineStats()
    #: The fields of a refusal lifecore must agree on, beyond its kind (see contract.FIELDS).
    compared_fields: ClassVar[Sequence[str]] = ()
    #: The factory bound by :meth:`bind` (None: the machine's own default, if it has one).
    bound_factory: ClassVar[Optional[Callable[..., Any]]] = None
    #: Further options bound by :meth:`bind`, by the names the constructor takes.
    bound_options: ClassVar[dict[str, Any]] = {}

    def __init__(self) -> None:
        super().__init__()
        self._in_rule = False
        self._history: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []  # this run's rules, in order
        self._step_failed = False  # a counted rule raised (see run_failed)
        # What was being handled when the machine was made (a run inside a user's except block):
        # not this run's error.
        self._handled_at_start = sys.exc_info()[1]
        type(self).stats.runs += 1

    @classmethod
    def bind(cls, factory: Callable[..., Any], name: Optional[str] = None, **options: Any) -> type[Self]:
        """A subclass whose machines test what ``factory`` makes (and take ``options``): its
        ``TestCase`` runs it under unittest or pytest. A ``factory`` that raises
        ``BackendUnavailableError`` (``lifecore.Device("cuda")`` where no CUDA device can open)
        skips the case with that reason (``unittest.SkipTest``) instead of failing it, unless
        ``LIFECORE_REQUIRE`` is set (:mod:`lifecore.testing.required`): then the error fails it.
        LifecoreTypeError for a ``factory`` that cannot be called or a ``name`` that is not a str."""
        check_factory(f"{cls.__name__}.bind", factory, optional=False)
        if name is not None and not isinstance(name, str):
            raise LifecoreTypeError(f"{cls.__name__}.bind: argument 'name' must be a str or None, got {type(name).__name__}")

        def skip_if_unavailable(*args: Any, **kwargs: Any) -> Any:
            try:
                return factory(*args, **kwargs)
            except BackendUnavailableError as error:
                if (required := requirement_note()) is not None:
                    raise BackendUnavailableError(f"{error} ({required})") from error
                raise unittest.SkipTest(str(error)) from error

        bound = type(name or f"{cls.__name__}Bound", (cls,),
                     {"bound_factory": staticmethod(skip_if_unavailable), "bound_options": dict(options)})
        return cast("type[Self]", bound)  # a subclass of cls, made at run time

    @classmethod
    def setup_steps(cls) -> int:
        """How many of a run's Hypothesis steps its ``@initialize`` rules take: Hypothesis counts
        them against ``stateful_step_count``, so N rule steps need N + this many."""
        return sum(1 for _, member in inspect.getmembers(cls)
                   if getattr(member, INITIALIZE_RULE_MARKER, None) is not None)

    @classmethod
    def run(cls, factory: Optional[Callable[..., Any]] = None, *, settings: Optional[Settings] = None,
            seed: Optional[int] = None, **options: Any) -> None:
        """Runs machines testing what ``factory`` makes (see :func:`run_machine`); LifecoreTypeError,
        before anything runs, for a ``factory`` that cannot be called, a ``settings`` that is not
        a Hypothesis ``settings`` or a ``seed`` that is not an int."""
        check_factory(f"{cls.__name__}.run", factory, optional=True)
        check_run_arguments(f"{cls.__name__}.run", settings, seed)
        run_machine(lambda: cls(factory, **options), settings=settings, seed=seed)  # type: ignore[call-arg]

    def factory_or_bound(self, given: Optional[Callable[..., Any]]) -> Optional[Callable[..., Any]]:
        """The factory the constructor was given, else the one bound to the class."""
        return given if given is not None else type(self).bound_factory

    def option_or_bound(self, name: str, given: Any) -> Any:
        """The option ``name`` the constructor was given (``given``), else the one :meth:`bind` bound
        under that name (None when neither)."""
        return given if given is not None else type(self).bound_options.get(name)

    def both(self, what: str, model_call: Callable[[], Any], core_call: Callable[[], Any]) -> Agreement:
        """The same operation on the model and on lifecore; they must agree (contract.both)."""
        return both(model_call, core_call, fields=self.compared_fields, what=what, stats=type(self).stats)

    def after_step(self) -> None:
        """Runs after every counted rule (a lifecycle's clean-up between steps)."""

    def run_failed(self) -> bool:
        """Whether this run is ending on an error: a counted rule raised, or (asked from
        :meth:`teardown`, which Hypothesis runs as the error propagates) an invariant or a step
        did. A teardown then lets go of everything without checking it, and what that
        clean-up raises is not reported: the run's own error is the failure, and Hypothesis
        shrinks toward it."""
        propagating = sys.exc_info()[1]
        return self._step_failed or (propagating is not None and propagating is not self._handled_at_start)

    def teardown(self) -> None:
        """Counts the machine's end in the lifecycle's stats (their ``on_run_end`` runs)."""
        type(self).stats.run_ended()


# Plain functions answer an argument they do not take with LifecoreTypeError (the
# machines' classes are Hypothesis's to call, so only the functions are guarded).
run_machine = _python_guard.guarded(run_machine, "run_machine")
