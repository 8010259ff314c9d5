// The backend-neutral pieces of the driver floor, without any backend: a status table's
// naming, the handle and allocation registries' refusals, the symbol table's bookkeeping and
// the kernel parameter slots.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "driver/allocation_registry.hpp"
#include "driver/handle_registry.hpp"
#include "driver/kernel_params.hpp"
#include "driver/native_status_table.hpp"
#include "driver/symbol_table.hpp"
#include "failing_allocations.hpp"
#include "test_support.hpp"

using namespace lifecore::driver;
using lifecore::test_support::allocations_before_failure;
using lifecore::test_support::expect_equal;

namespace {

constexpr std::array<NativeStatus, 4> rows{{
    {0, Code::success, "T_OK"},
    {7, Code::invalid_value, "T_BAD_VALUE"},
    {8, Code::invalid_handle, "T_BAD_HANDLE"},
    {9, Code::unknown, "T_UNKNOWN"},
}};
constexpr std::array sticky{8};
constexpr NativeStatusTable table{rows, "T_", sticky};

void a_table_names_its_codes() {
  const StatusNaming& naming = table_naming<table>();
  CHECK(naming.code(7) == Code::invalid_value && naming.code(5) == Code::unknown);
  CHECK(naming.native(Code::invalid_handle) == 8);
  CHECK(naming.native(Code::out_of_memory) == 9);  // no row: the table's unknown
  expect_equal(naming.name(7), "T_BAD_VALUE", "a row's name");
  expect_equal(naming.name(42), "T_42", "a number without a row");
  CHECK(naming.sticky(8) && !naming.sticky(7));
  CHECK(&naming == &table_naming<table>());
  CHECK(keeps_table_name(Code::capture_unsupported) && keeps_table_name(Code::capture_wrong_thread));
  CHECK(!keeps_table_name(Code::graph_exec_update_failure) && !keeps_table_name(Code::not_supported));
}

struct Thing {};
enum class ThingHandle : std::uintptr_t {};
enum class OwnerHandle : std::uintptr_t {};

void the_handle_registry_refuses_what_is_not_live() {
  const StatusNaming& naming = table_naming<table>();
  HandleRegistry<Thing*, ThingHandle> things{"thing", naming};
  Thing a, b, c;
  const ThingHandle ha = things.adopt(&a, OwnerHandle{1});
  const ThingHandle hb = things.adopt(&b, OwnerHandle{2});
  const ThingHandle hc = things.adopt(&c);
  CHECK(static_cast<std::uintptr_t>(ha) == reinterpret_cast<std::uintptr_t>(&a));
  Thing* found = nullptr;
  CHECK(things.find(ha, "get", &found).ok() && found == &a);
  Status stale = things.find(ThingHandle{0}, "get", &found);
  CHECK(stale.code == Code::invalid_handle && stale.native_code == 8 && stale.call == "get");
  CHECK(lifecore::test_support::contains(stale.message, "not a live thing"));
  auto owned = things.mark_owned_by(OwnerHandle{1});
  CHECK(owned.size() == 1 && !things.contains(ha) && things.contains(hb) && things.contains(hc));
  CHECK(!things.find(ha, "get", &found).ok());  // dying: no call reaches it
  CHECK(things.mark_owned_by(OwnerHandle{1}).empty());  // nor a second owner's destroy
  things.settle(owned, false);  // the owner's destroy failed: its handles are live again
  CHECK(things.contains(ha));
  owned = things.mark_owned_by(OwnerHandle{1});
  things.settle(owned, true);  // it succeeded: forgotten
  CHECK(!things.contains(ha));
  CHECK(things.release(hb, "destroy", [](Thing*) { return Status::success(); }).ok());
  CHECK(!things.find(hb, "get", &found).ok());
  std::vector<Thing*> rest = things.take_all();
  CHECK(rest.size() == 1 && rest[0] == &c && !things.contains(hc));
}

// A driver gives a destroyed object's address to the next object created: another thread's
// create between the native destroy and the registry's forget must not be forgotten with it.
void a_release_forgets_before_the_destroy() {
  const StatusNaming& naming = table_naming<table>();
  HandleRegistry<Thing*, ThingHandle> things{"thing", naming};
  Thing a;
  const ThingHandle ha = things.adopt(&a);
  ThingHandle reused{};
  Status released = things.release(ha, "destroy", [&](Thing* native) {
    CHECK(native == &a && !things.contains(ha));  // forgotten before the native destroy
    reused = things.adopt(&a);  // "another thread" creates and is given the same address
    return Status::success();
  });
  CHECK(released.ok() && reused == ha && things.contains(reused));  // the new object stays live
  // A failed destroy keeps the handle; a handle not live is refused before any native call.
  bool called = false;
  Status failed = things.release(reused, "destroy", [&](Thing*) {
    called = true;
    return local_status(naming, Code::invalid_value, "destroy", "refused");
  });
  CHECK(called && !failed.ok() && things.contains(reused));
  called = false;
  Status stale = things.release(ThingHandle{12345}, "destroy", [&](Thing*) {
    called = true;
    return Status::success();
  });
  CHECK(!called && stale.code == Code::invalid_handle && stale.call == "destroy");
  CHECK(!things.release(ThingHandle{0}, "destroy", [&](Thing*) { return Status::success(); }).ok());
}

// A failed destroy makes its handle live again while other threads' creates grow the table:
// without allocating (a rehash's allocation, failing, would have lost the live object).
void a_failed_destroy_keeps_its_handle_without_allocating() {
  const StatusNaming& naming = table_naming<table>();
  std::vector<Thing> others(300);
  for (std::size_t grown = 1; grown <= others.size(); ++grown) {  // some count crosses a growth step
    HandleRegistry<Thing*, ThingHandle> things{"thing", naming};
    Thing a;
    const ThingHandle ha = things.adopt(&a);
    Status refused = local_status(naming, Code::invalid_value, "destroy", "refused");
    Status failed;
    try {
      failed = things.release(ha, "destroy", [&](Thing*) {
        for (std::size_t i = 0; i < grown; ++i) things.adopt(&others[i]);
        allocations_before_failure = 0;  // the heap is exhausted from here
        return std::move(refused);
      });
    } catch (const std::bad_alloc&) {
      allocations_before_failure = -1;
      CHECK(!"the failed destroy's restore allocated");
    }
    allocations_before_failure = -1;
    CHECK(failed.code == Code::invalid_value && things.contains(ha) && things.contains(ThingHandle{
        reinterpret_cast<std::uintptr_t>(&others[grown - 1])}));
  }
}

void the_allocation_registry_refuses_a_foreign_free() {
  AllocationRegistry allocations{table_naming<table>()};
  CHECK(allocations.adopt(0x1000) == 0x1000);
  allocations.adopt(0x2000);
  std::uint64_t first = 0, other = 0;
  CHECK(allocations.begin_free(0x1000, "free", &first).ok());
  Status twice = allocations.begin_free(0x1000, "free", &other);  // dying: no second free reaches it
  CHECK(twice.code == Code::invalid_value && twice.native_code == 7 && twice.call == "free");
  allocations.settle(0x1000, first, true);
  CHECK(!allocations.begin_free(0x1000, "free", &other).ok());
  CHECK(!allocations.begin_free(0x2008, "free", &other).ok());  // inside an allocation, not its start
  // A failed free leaves it live, without allocating, however many allocations came since.
  std::uint64_t freeing = 0;
  CHECK(allocations.begin_free(0x2000, "free", &freeing).ok());
  for (DevicePtr p = 0x10000; p < 0x10000 + 64 * 0x100; p += 0x100) allocations.adopt(p);
  allocations_before_failure = 0;
  allocations.settle(0x2000, freeing, false);
  allocations_before_failure = -1;
  CHECK(allocations.begin_free(0x2000, "free", &freeing).ok());
  // The driver gives a freed address out again before its free settles: the new one stays,
  // and a free of the new one begun before the old settles is that free's to settle.
  allocations.adopt(0x2000);
  std::uint64_t again = 0;
  CHECK(allocations.begin_free(0x2000, "free", &again).ok() && again != freeing);
  allocations.settle(0x2000, freeing, true);  // late: leaves the new allocation's mark alone
  allocations.settle(0x2000, again, false);   // the new one's free failed: it stays live
  CHECK(allocations.take_all().size() == 65);
}

// A late settle of a destroy that succeeded meets a new object at the same address, whose own
// destroy has begun: it must leave that destroy's mark alone (it erased it, and the new
// object was lost when its destroy then failed). And a module marked dying first refuses a
// second unload before it marks any function.
void a_late_settle_leaves_a_new_objects_destroy_alone() {
  const StatusNaming& naming = table_naming<table>();
  HandleRegistry<Thing*, ThingHandle> things{"thing", naming};
  Thing a;
  const ThingHandle h = things.adopt(&a);
  DyingTicket first, second;
  CHECK(things.begin_release(h, "destroy", &first).ok());
  // The native destroy succeeds; another thread's create is given the same address, and a
  // third thread begins destroying that new object.
  CHECK(things.adopt(&a) == h);
  CHECK(things.begin_release(h, "destroy", &second).ok());
  things.settle(first, true);    // the first destroy settles late
  things.settle(second, false);  // the new object's destroy failed
  CHECK(things.contains(h));

  HandleRegistry<Thing*, OwnerHandle> modules{"module", naming};
  Thing module, function;
  const OwnerHandle m = modules.adopt(&module);
  const ThingHandle f = things.adopt(&function, m);
  DyingTicket unloading, again;
  CHECK(modules.begin_release(m, "unload", &unloading).ok());
  const auto functions = things.mark_owned_by(m);
  CHECK(functions.size() == 1 && !things.contains(f));
  CHECK(!modules.begin_release(m, "unload", &again).ok());  // a second unload: refused, nothing marked
  things.settle(functions, false);  // the unload failed: module and function live again
  modules.settle(unloading, false);
  CHECK(modules.contains(m) && things.contains(f));

  // A lookup's adoption taken back: only that adoption, never a later one of the address.
  DyingTicket looked_up, later;
  things.adopt(&function, m, &looked_up);
  things.adopt(&function, m, &later);
  things.forget(looked_up);
  CHECK(things.contains(f));
  things.forget(later);
  CHECK(!things.contains(f));
}

int resolved_entry(int x) { return x + 1; }

void the_symbol_table_records_each_entry() {
  using Entry = int (*)(int);
  Entry present = nullptr, optional = nullptr, required = nullptr;
  SymbolTable symbols;
  symbols.bind(present, reinterpret_cast<void*>(&resolved_entry), "present", true, "present (v1)");
  symbols.bind(optional, nullptr, "optional", false, "optional (v2)");
  CHECK(symbols.missing().empty());
  symbols.bind(required, nullptr, "required", true, "required (v3)");
  symbols.bind(required, nullptr, "later", true, "later (v4)");
  expect_equal(symbols.missing(), "required (v3)", "the first missing required entry");
  CHECK(present != nullptr && present(1) == 2 && optional == nullptr);
  auto resolved = symbols.take_resolved();
  CHECK(resolved.size() == 4 && resolved[0].first == "present" && resolved[0].second && !resolved[1].second);
}

void kernel_params_give_each_argument_a_slot() {
  std::vector<KernelArg> args{{ArgKind::u32, 7}, {ArgKind::pointer, 0x1234567890}};
  KernelParams params(args);
  void** data = params.data();
  CHECK(*static_cast<std::uint32_t*>(data[0]) == 7);
  CHECK(*static_cast<std::uint64_t*>(data[1]) == 0x1234567890);
  KernelParams none(std::vector<KernelArg>{});
  CHECK(none.data() == nullptr);
}

}  // namespace

int main() {
  a_table_names_its_codes();
  the_handle_registry_refuses_what_is_not_live();
  a_release_forgets_before_the_destroy();
  a_failed_destroy_keeps_its_handle_without_allocating();
  the_allocation_registry_refuses_a_foreign_free();
  a_late_settle_leaves_a_new_objects_destroy_alone();
  the_symbol_table_records_each_entry();
  kernel_params_give_each_argument_a_slot();
  return lifecore::test_support::finish("driver_floor_shared_test");
}
