// What every harness shares: running a decoder on fuzz input while letting through only the
// errors pscore documents for bad input, and a scratch directory for decoders that read files.
#pragma once
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "common/error.h"

namespace pscore::fuzz {

// Runs decode(); a pscore::Error (NetworkError, TimeoutError, ...) or std::invalid_argument is
// the documented answer to bad bytes and is swallowed. Anything else escapes, and libFuzzer
// reports the uncaught exception as a crash: a finding, like a sanitizer report.
template <typename Decode>
void expect_documented_errors(Decode&& decode) {
  try {
    decode();
  } catch (const pscore::Error&) {
  } catch (const std::invalid_argument&) {
  }
}

// Stops the run with a message when a decoder accepted input that breaks its own contract.
inline void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}

// A directory of this process's own (in /dev/shm when it exists: no disk writes per input).
inline const std::string& scratch_dir() {
  // Never destroyed: the exit handler that removes the directory runs after static destructors.
  static const std::string* dir = [] {
    std::string tmpl = (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    tmpl += "/pscore_fuzz_XXXXXX";
    if (!mkdtemp(tmpl.data())) std::abort();
    std::atexit([] { std::filesystem::remove_all(scratch_dir()); });
    return new std::string(tmpl);
  }();
  return *dir;
}

// Replaces `path` with the bytes data[0, size).
inline void write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) std::abort();
}

}  // namespace pscore::fuzz
