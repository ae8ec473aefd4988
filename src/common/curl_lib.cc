#include "common/curl_lib.h"

#include <dlfcn.h>

#include <string>
#include <type_traits>

namespace seedd {
namespace {

constexpr const char* kSoname = "libcurl.so.4";

std::string Unloadable(const char* soname, const std::string& why) {
  return std::string(soname) + " could not be loaded (" + why +
         "): S3 stores and http(s) origins need libcurl 4 (Debian: apt-get install libcurl4)";
}

}  // namespace

Result<CurlLib> OpenCurl(const char* soname) {
  // RTLD_LOCAL: libcurl's symbols (and its libraries') stay out of the global
  // scope, so nothing loaded later binds to them by accident.
  void* handle = ::dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = ::dlerror();
    return Status::Unavailable(Unloadable(soname, err != nullptr ? err : "dlopen failed"));
  }
  CurlLib lib{};
  std::string missing;
  auto get = [&](auto*& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(handle, name));
    if (fn == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(name);
  };
  get(lib.global_init, "curl_global_init");
  get(lib.easy_init, "curl_easy_init");
  get(lib.easy_cleanup, "curl_easy_cleanup");
  get(lib.easy_reset, "curl_easy_reset");
  get(lib.easy_setopt, "curl_easy_setopt");
  get(lib.easy_getinfo, "curl_easy_getinfo");
  get(lib.easy_perform, "curl_easy_perform");
  get(lib.easy_strerror, "curl_easy_strerror");
  get(lib.slist_append, "curl_slist_append");
  get(lib.slist_free_all, "curl_slist_free_all");
  if (!missing.empty()) {
    return Status::Unavailable(Unloadable(soname, "it lacks " + missing));
  }
  return lib;
}

Result<const CurlLib*> Curl() {
  // Opened and initialised once, by whichever thread comes first (a function
  // static's initialisation is thread-safe); an error is kept as well.
  static const Result<CurlLib> lib = []() -> Result<CurlLib> {
    Result<CurlLib> opened = OpenCurl(kSoname);
    if (!opened.ok()) return opened;
    if (opened->global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
      return Status::Internal(std::string(kSoname) + " failed to initialise (curl_global_init)");
    }
    return opened;
  }();
  if (!lib.ok()) return lib.status();
  return &*lib;
}

}  // namespace seedd
