// A shared library opened at run time (dlopen) from the first of several candidate paths, so
// pscore neither links against nor needs at build time the GPU libraries it can use.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
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

// A library's table of entry points (Api), bound by `bind` from the first candidate that opens on
// the first get(), then kept for the process's life and read without a lock. A failed load
// throws, and the next get() tries the candidates again.
template <typename Api>
class LazyLibrary {
 public:
  using Bind = Api (*)(const DynamicLibrary&);
  LazyLibrary(std::string what, std::vector<std::string> candidates, Bind bind)
      : what_(std::move(what)), candidates_(std::move(candidates)), bind_(bind) {}

  // Where the first get() loads from, in order (paths or sonames).
  void set_candidates(std::vector<std::string> candidates) {
    std::lock_guard<std::mutex> lock(mu_);
    candidates_ = std::move(candidates);
  }

  const Api& get() {
    if (const Api* api = ready_.load(std::memory_order_acquire)) return *api;
    std::lock_guard<std::mutex> lock(mu_);
    if (!loaded_) {
      auto library = DynamicLibrary::open_first(candidates_, what_);
      Api api = bind_(library);
      loaded_.reset(new Loaded{std::move(library), std::move(api)});
      ready_.store(&loaded_->api, std::memory_order_release);
    }
    return loaded_->api;
  }

 private:
  struct Loaded {
    DynamicLibrary library;
    Api api;
  };
  std::mutex mu_;
  const std::string what_;
  std::vector<std::string> candidates_;  // guarded by mu_
  const Bind bind_;
  std::unique_ptr<Loaded> loaded_;   // guarded by mu_; set once
  std::atomic<const Api*> ready_{};  // loaded_->api once loaded: the lock-free fast path
};

}  // namespace pscore::gpu
