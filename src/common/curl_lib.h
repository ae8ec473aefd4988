// libcurl, opened on first use (dlopen) instead of linked. Only S3 stores and
// http(s) origins use it; linked, its 27 libraries (TLS, Kerberos, LDAP, SSH,
// IDN, ...) were loaded and relocated by every seedd and seedctl at start,
// about half of what a daemon spent before it served. A host without libcurl
// runs everything else and gets an error naming the library where one is
// needed. Thread-safe.
#pragma once

#include <curl/curl.h>

#include <string>
#include <type_traits>

#include "seedd/status.h"

namespace seedd {

// The functions of libcurl seedd calls. Options are set with Setopt, which
// checks the argument's type as curl.h's own checks did for a linked
// curl_easy_setopt: through the pointer a variadic call checks none.
struct CurlLib {
  CURLcode (*global_init)(long);
  CURL* (*easy_init)();
  void (*easy_cleanup)(CURL*);
  void (*easy_reset)(CURL*);
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...);
  CURLcode (*easy_getinfo)(CURL*, CURLINFO, ...);
  CURLcode (*easy_perform)(CURL*);
  const char* (*easy_strerror)(CURLcode);
  curl_slist* (*slist_append)(curl_slist*, const char*);
  void (*slist_free_all)(curl_slist*);

  // easy_setopt with a long (curl_off_t is one here), a pointer or a callback:
  // an int or a bool would be read as a long, its upper bits undefined.
  template <typename T>
  CURLcode Setopt(CURL* c, CURLoption option, T value) const {
    static_assert(std::is_same_v<T, long> || std::is_same_v<T, curl_off_t> || std::is_pointer_v<T>,
                  "a curl option takes a long, a curl_off_t, a pointer or a callback");
    return easy_setopt(c, option, value);
  }
  // A failed transfer in libcurl's words: `detail` (its CURLOPT_ERRORBUFFER:
  // the address and port it could not reach, the certificate problem) when
  // written, else the code's text.
  std::string Failure(CURLcode rc, const char* detail) const {
    return detail != nullptr && detail[0] != '\0' ? std::string(detail) : easy_strerror(rc);
  }
};

// The process's libcurl (libcurl.so.4), opened and initialised
// (curl_global_init) by the first call; later calls return the same, or the
// same error: "libcurl.so.4 could not be loaded (...): S3 stores and http(s)
// origins need libcurl 4 (Debian: apt-get install libcurl4)".
Result<const CurlLib*> Curl();

// Opens `soname` and reads the functions off it, without curl_global_init and
// without caching: Curl()'s work, for a test of its errors. The library stays
// loaded.
Result<CurlLib> OpenCurl(const char* soname);

}  // namespace seedd
