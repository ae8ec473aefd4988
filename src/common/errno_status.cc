#include "common/errno_status.h"

#include <cerrno>
#include <cstring>

namespace seedd {

Status ErrnoStatus(std::string_view what, int err) {
  std::string msg(what);
  msg += ": ";
  msg += std::strerror(err);
  switch (err) {
    case ENOENT:
      return Status::NotFound(std::move(msg));
    case EEXIST:
      return Status::AlreadyExists(std::move(msg));
    case EACCES:
    case EPERM:
      return Status::PermissionDenied(std::move(msg));
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
    case EMFILE:
    case ENFILE:
      return Status::ResourceExhausted(std::move(msg));
    case ETIMEDOUT:
      return Status::DeadlineExceeded(std::move(msg));
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE:
    case EHOSTUNREACH:
    case ENETUNREACH:
      return Status::Unavailable(std::move(msg));
    default:
      return Status::IoError(std::move(msg));
  }
}

}  // namespace seedd
