// How a native CUDA / HIP error code becomes a Status, without a driver: the runtime's own
// name and text are used when it gives them, except for the stream-capture errors (900 to 908
// exactly), which keep lifecore's canonical names; an answer that is missing, empty, failed,
// "hipErrorUnknown" for a code the runtime does not know, "unknown error", or the name again
// falls back to lifecore's table.
#include <cstdio>
#include <string>

#include "driver/cuda/cuda_loader.hpp"
#include "driver/hip/hip_loader.hpp"
#include "lifecore/driver/status.hpp"
#include "test_support.hpp"

using namespace lifecore::driver;
using lifecore::test_support::expect_equal;

namespace {

std::string hip_status_name(int native) { return hip::hip_naming().name(native); }
std::string cuda_status_name(int native) { return cuda::cuda_naming().name(native); }
// The standard description of a native code, as lifecore's table has it.
std::string table_text(const StatusNaming& naming, int native) {
  return std::string(code_description(naming.code(native)));
}
std::string hip_text_of(int native) { return table_text(hip::hip_naming(), native); }
std::string cuda_text_of(int native) { return table_text(cuda::cuda_naming(), native); }

// --- a HIP runtime's answers -------------------------------------------------------------

const char* hip_name(int code) {
  switch (code) {
    case 5: return "";
    case 6: return nullptr;
    case 777: return "hipErrorUnknown";  // a code this runtime does not know
    default: return "runtimeName";
  }
}

const char* hip_text(int code) {
  switch (code) {
    case 2: return "unknown error";
    case 3: return "runtimeName";  // the name again
    case 4: return "";
    case 6: return nullptr;
    default: return "runtime text";
  }
}

void hip_names_and_texts() {
  hip::HipApi api;
  api.hipGetErrorName = &hip_name;
  api.hipGetErrorString = &hip_text;
  Status s = hip::hip_status(api, 1, "hipCall");
  CHECK(s.native_code == 1 && s.code == Code::invalid_value && s.call == "hipCall");
  expect_equal(s.name, "runtimeName", "hip: the runtime's name");
  expect_equal(s.message, "runtime text", "hip: the runtime's text");
  // The capture errors keep their names, exactly from 900 to 908.
  expect_equal(hip::hip_status(api, 900, "c").name, hip_status_name(900), "hip 900");
  expect_equal(hip::hip_status(api, 908, "c").name, hip_status_name(908), "hip 908");
  expect_equal(hip::hip_status(api, 899, "c").name, "runtimeName", "hip 899");
  expect_equal(hip::hip_status(api, 909, "c").name, "runtimeName", "hip 909");
  // Fallbacks to the table.
  expect_equal(hip::hip_status(api, 777, "c").name, hip_status_name(777), "hip: unknown to the runtime");
  expect_equal(hip::hip_status(api, 5, "c").name, hip_status_name(5), "hip: empty name");
  expect_equal(hip::hip_status(api, 6, "c").name, hip_status_name(6), "hip: no name");
  const std::string table_text_2 = hip_text_of(2);
  expect_equal(hip::hip_status(api, 2, "c").message, table_text_2, "hip: 'unknown error'");
  expect_equal(hip::hip_status(api, 3, "c").message, hip_text_of(3), "hip: the name again");
  expect_equal(hip::hip_status(api, 4, "c").message, hip_text_of(4), "hip: empty text");
  expect_equal(hip::hip_status(api, 6, "c").message, hip_text_of(6), "hip: no text");
  // A runtime without the entry points: the table alone.
  hip::HipApi bare;
  Status plain = hip::hip_status(bare, 1, "c");
  expect_equal(plain.name, hip_status_name(1), "hip bare name");
  expect_equal(plain.message, hip_text_of(1), "hip bare text");
}

// --- a CUDA driver's answers -------------------------------------------------------------

int cu_name(int code, const char** out) {
  switch (code) {
    case 3: *out = "failedName"; return 1;  // the call itself failed: its answer is ignored
    case 4: *out = nullptr; return 0;
    default: *out = "DRIVER_NAME"; return 0;
  }
}

int cu_text(int code, const char** out) {
  switch (code) {
    case 3: *out = "failed text"; return 1;
    case 4: *out = nullptr; return 0;
    default: *out = "driver text"; return 0;
  }
}

void cuda_names_and_texts() {
  cuda::CudaApi api;
  api.cuGetErrorName = &cu_name;
  api.cuGetErrorString = &cu_text;
  Status s = cuda::cuda_status(api, 1, "cuCall");
  CHECK(s.native_code == 1 && s.code == Code::invalid_value && s.call == "cuCall");
  expect_equal(s.name, "DRIVER_NAME", "cuda: the driver's name");
  expect_equal(s.message, "driver text", "cuda: the driver's text");
  expect_equal(cuda::cuda_status(api, 900, "c").name, cuda_status_name(900), "cuda 900");
  expect_equal(cuda::cuda_status(api, 908, "c").name, cuda_status_name(908), "cuda 908");
  expect_equal(cuda::cuda_status(api, 899, "c").name, "DRIVER_NAME", "cuda 899");
  expect_equal(cuda::cuda_status(api, 909, "c").name, "DRIVER_NAME", "cuda 909");
  expect_equal(cuda::cuda_status(api, 900, "c").message, "driver text", "cuda 900 text");
  Status failed = cuda::cuda_status(api, 3, "c");
  expect_equal(failed.name, cuda_status_name(3), "cuda: a failed name lookup");
  expect_equal(failed.message, cuda_text_of(3), "cuda: a failed text lookup");
  Status empty = cuda::cuda_status(api, 4, "c");
  expect_equal(empty.name, cuda_status_name(4), "cuda: no name");
  expect_equal(empty.message, cuda_text_of(4), "cuda: no text");
  cuda::CudaApi bare;
  Status plain = cuda::cuda_status(bare, 1, "c");
  expect_equal(plain.name, cuda_status_name(1), "cuda bare name");
  expect_equal(plain.message, cuda_text_of(1), "cuda bare text");
}

// 800 is no hipError_t (hipGetErrorName calls it hipErrorUnknown): HIP has no not_permitted.
void hip_has_no_800() {
  CHECK(hip::hip_naming().code(800) == Code::unknown);
  expect_equal(hip_status_name(800), "hipError800", "hip 800");
  CHECK(hip::hip_native(Code::not_permitted) == hip::hip_native(Code::unknown));
}

}  // namespace

int main() {
  hip_names_and_texts();
  hip_has_no_800();
  cuda_names_and_texts();
  return lifecore::test_support::finish("driver_status_names_test");
}
