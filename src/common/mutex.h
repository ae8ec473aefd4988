// A std::mutex the thread-safety analysis knows (libstdc++'s carries no
// capability), and its scoped lock. MutexLock converts to the
// std::unique_lock a std::condition_variable waits on; a wait releases and
// retakes the mutex inside, so the analysis sees it held throughout, which is
// what the code after the wait may assume.
//
// Thread safety: as std::mutex.
#pragma once

#include <mutex>

#include "common/thread_annotations.h"

namespace seedd {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // For code the analysis cannot follow (a callback run under the lock).
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Lets go early (e.g. around a blocking call) and takes it again.
  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }

  // For std::condition_variable::wait/wait_for/wait_until.
  operator std::unique_lock<std::mutex>&() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace seedd
