"""Shared by the benchmark scripts: the backend to run on, and the table printer.

The measurements themselves live in ``lifecore.testing.stream_benchmarks`` so that
``lifecore bench`` can run them from an installed package.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

import lifecore
from lifecore.testing.stream_benchmarks import format_table

__all__ = ["device_factory", "format_table", "parse_args"]


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--backend", default="mock", help="mock, cuda, hip or auto (default mock)")
    parser.add_argument("--graphs", default="auto", choices=["auto", "hardware", "software"])
    return parser.parse_args()


def device_factory(args: argparse.Namespace) -> Callable[[], Any]:
    return lambda: lifecore.Device(args.backend, graphs=args.graphs)
