// libFuzzer target: a safetensors file (length prefix, header JSON, data) opened and every tensor viewed.
#include "fuzz_support.h"
#include "lmx/io/safetensors.h"

#include <sys/mman.h>
#include <unistd.h>

#include <string>

// The input becomes an in-memory file (memfd), opened by path exactly as a checkpoint file is:
// mapped, header parsed and validated, then each tensor's view is read end to end.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = ::memfd_create("fuzz.safetensors", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (size > 0 && ::write(fd, data, size) != static_cast<ssize_t>(size)) {
    ::close(fd);
    return 0;
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  lmx::fuzz::expect_only_lmx_errors([&] {
    auto file = lmx::SafetensorsFile::open(path);
    uint8_t sink = 0;
    for (const auto& name : file->names()) {
      lmx::Tensor t = file->tensor(name);
      const auto* bytes = static_cast<const uint8_t*>(t.raw_data());
      for (size_t i = 0; i < t.nbytes(); i += 4096) sink ^= bytes[i];
      if (t.nbytes() > 0) sink ^= bytes[t.nbytes() - 1];
    }
    (void)file->metadata();
    // Keeps the reads: an out-of-bounds view faults (or trips ASan) here.
    asm volatile("" : : "r"(sink));
  });
  ::close(fd);
  return 0;
}
