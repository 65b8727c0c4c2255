// A shared library opened at run time (dlopen) from the first of several candidate paths, so
// pscore neither links against nor needs at build time the GPU libraries it can use.
#pragma once

#include <string>
#include <vector>

namespace pscore::gpu {

class DynamicLibrary {
 public:
  // Opens the first candidate that loads: a path, or a bare soname for the system's search.
  // pscore::Error naming `what` and every candidate with dlopen's reason when none loads.
  static DynamicLibrary open_first(const std::vector<std::string>& candidates,
                                   const std::string& what);

  DynamicLibrary(DynamicLibrary&& other) noexcept;
  DynamicLibrary& operator=(DynamicLibrary&&) = delete;
  DynamicLibrary(const DynamicLibrary&) = delete;
  ~DynamicLibrary();

  // The address of `name`; pscore::Error naming the library when it lacks the symbol.
  void* symbol(const char* name) const;
  const std::string& path() const { return path_; }

 private:
  DynamicLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  void* handle_;
  std::string path_;
};

// Fills a function pointer from `library`'s symbol of the same name.
template <typename Fn>
void bind_symbol(const DynamicLibrary& library, Fn*& fn, const char* name) {
  fn = reinterpret_cast<Fn*>(library.symbol(name));
}

}  // namespace pscore::gpu
