#include "gpu/dynamic_library.h"

#include <dlfcn.h>

#include <utility>

#include "common/error.h"

namespace pscore::gpu {

DynamicLibrary DynamicLibrary::open_first(const std::vector<std::string>& candidates,
                                          const std::string& what) {
  std::string tried;
  for (const auto& path : candidates) {
    // RTLD_LOCAL: the library's symbols stay out of the global namespace, so a second copy
    // loaded by another framework cannot bind to ours.
    if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return {handle, path};
    const char* why = dlerror();
    tried += "\n  " + path + ": " + (why ? why : "not loadable");
  }
  throw Error("could not load " + what + "; tried:" + (tried.empty() ? " nothing" : tried));
}

DynamicLibrary::DynamicLibrary(DynamicLibrary&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), path_(std::move(other.path_)) {}

DynamicLibrary::~DynamicLibrary() {
  if (handle_) dlclose(handle_);
}

void* DynamicLibrary::symbol(const char* name) const {
  dlerror();
  void* address = dlsym(handle_, name);
  if (!address) throw Error(path_ + " has no symbol " + name + ": is it the right library?");
  return address;
}

}  // namespace pscore::gpu
