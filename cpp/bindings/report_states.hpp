// Reports as values that travel: a capacity snapshot, a domain's usage, a demand, a blocker, a
// rejection, a cancel snapshot and a backend's info are read from one process's state at one
// moment, and an engine sends them elsewhere (a metrics process, a scheduler in another
// process). Each one's state is a tuple of plain values (ints, strs, bools, enum members,
// capacity sources and the nested reports), which pickle, copy and == use; __setstate__
// rebuilds a report from such a tuple, checked as any argument is, so an altered pickle gives
// a LifecoreTypeError or InvalidArgumentError naming the field, never a report no coordinator
// could have made. What belongs to one process is not carried: the coordinator a rejection was
// taken by (a source read back names none either).
#pragma once

#include <new>

#include <nanobind/nanobind.h>

#include "lifecore/driver/driver.hpp"
#include "lifecore/sequence/capacity.hpp"
#include "lifecore/sequence/session.hpp"

namespace lifecore::bindings {

namespace nb = nanobind;

nb::tuple report_state(const sequence::DomainUsage& usage);
nb::tuple report_state(const sequence::CapacitySnapshot& snapshot);
nb::tuple report_state(const sequence::CapacityDemand& demand);
nb::tuple report_state(const sequence::CapacityBlocker& blocker);
nb::tuple report_state(const sequence::AdmissionRejected& rejected);
nb::tuple report_state(const sequence::CancelSnapshot& cancel);
nb::tuple report_state(const driver::BackendInfo& info);

// The report a state describes; raises naming the field that is wrong.
template <class Report>
Report report_from_state(nb::handle state);
template <> sequence::DomainUsage report_from_state<sequence::DomainUsage>(nb::handle state);
template <> sequence::CapacitySnapshot report_from_state<sequence::CapacitySnapshot>(nb::handle state);
template <> sequence::CapacityDemand report_from_state<sequence::CapacityDemand>(nb::handle state);
template <> sequence::CapacityBlocker report_from_state<sequence::CapacityBlocker>(nb::handle state);
template <> sequence::AdmissionRejected report_from_state<sequence::AdmissionRejected>(nb::handle state);
template <> sequence::CancelSnapshot report_from_state<sequence::CancelSnapshot>(nb::handle state);
template <> driver::BackendInfo report_from_state<driver::BackendInfo>(nb::handle state);

// The two entries a report's class binds: `.def("__getstate__", &get_report_state<T>, ...)`
// and `.def("__setstate__", &set_report_state<T>, ...)`. nanobind calls __setstate__ on an
// instance not yet made (as pickle and copy do), and refuses it on one already made.
template <class Report>
nb::tuple get_report_state(const Report& report) {
  return report_state(report);
}
template <class Report>
void set_report_state(Report& self, nb::handle state) {
  new (&self) Report(report_from_state<Report>(state));
}

inline constexpr const char* report_getstate_sig = "def __getstate__(self) -> tuple[typing.Any, ...]";
inline constexpr const char* report_getstate_doc =
    "The report as a tuple of plain values (what pickle, copy and == use).";
inline constexpr const char* report_setstate_doc =
    "Rebuilds the report from __getstate__()'s tuple, checking every field (pickle and copy call it).";

}  // namespace lifecore::bindings
