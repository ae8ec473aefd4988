#!/bin/bash
# The locking contracts are checked: clang's -Wthread-safety, with the
# project's Mutex and annotations, rejects a guarded member read without its
# mutex and a REQUIRES method called without it, and accepts the same code
# with the lock taken. (The whole library is built this way by `make
# fuzz-build`, which `make test` runs.)
set -euo pipefail
src=$1
cxx=${CLANGXX:-clang++-14}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
check() {  # name, expect (ok|fail), body
  cat > "$work/$1.cc" <<CC
#include <condition_variable>
#include "common/mutex.h"
namespace seedd {
class Counter {
 public:
  $3
 private:
  void BumpLocked() REQUIRES(mu_) { ++n_; }
  Mutex mu_;
  std::condition_variable cv_;
  int n_ GUARDED_BY(mu_) = 0;
};
}  // namespace seedd
CC
  if out=$("$cxx" -std=c++20 -fsyntax-only -Wthread-safety -Werror -I "$src/src" "$work/$1.cc" 2>&1); then
    got=ok
  else
    got=fail
  fi
  if [[ $got != "$2" ]]; then
    echo "FAIL $1: expected $2, got $got"
    echo "$out"
    exit 1
  fi
  echo "ok   $1 ($2)"
}
check locked_read ok 'int Get() { MutexLock lock(mu_); return n_; }'
check unlocked_read fail 'int Get() { return n_; }'
check requires_called_locked ok 'void Bump() { MutexLock lock(mu_); BumpLocked(); }'
check requires_called_unlocked fail 'void Bump() { BumpLocked(); }'
check read_after_early_unlock fail 'int Get() { MutexLock lock(mu_); lock.Unlock(); return n_; }'
check wait_predicate_annotated ok 'void Wait() { MutexLock lock(mu_); cv_.wait(lock, [this]() REQUIRES(mu_) { return n_ > 0; }); }'
check wait_predicate_unannotated fail 'void Wait() { MutexLock lock(mu_); cv_.wait(lock, [this] { return n_ > 0; }); }'
