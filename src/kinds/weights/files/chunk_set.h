// The chunks a fetching daemon has verified, for its data-plane server to relay
// and to tell its neighbours about: a bitmap plus the order the chunks arrived
// in, so that a neighbour asks "what is new since entry c" and waits for it
// instead of polling the whole state. A waiter may say which chunks it wants
// (a watcher's missing ones): it is woken only for those, so a relay's watchers
// are not woken, nor answered, for every chunk it verifies.
//
// Thread safety: Set, Test, Bitmap, Since from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"

namespace seedd {

class ChunkSet {
 public:
  explicit ChunkSet(size_t size);
  size_t size() const { return size_; }
  // Adds chunk i (once: a second Set of it changes nothing) and wakes Since.
  void Set(size_t i);
  bool Test(size_t i) const;
  // How many chunks were added.
  size_t Count() const;
  // The data-plane bitmap: ceil(size/8) bytes, chunk i is bit 0x80 >> (i % 8).
  // `*cursor` (when given) is set to how many chunks were added before the bitmap
  // was taken: every one of them is in it.
  std::string Bitmap(uint64_t* cursor = nullptr) const;
  // The chunks added after the first `cursor` ones, waiting up to `wait` for one;
  // `*next` is the cursor to ask with next time. A cursor past the end (another
  // daemon's) starts over from 0. `wanted` (a bitmap as Bitmap's, or empty for
  // every chunk): only the chunks it names are returned and waited for; the
  // others added meanwhile are passed over (`*next` is past them).
  std::vector<uint32_t> Since(uint64_t cursor, std::chrono::milliseconds wait, uint64_t* next,
                              std::string_view wanted = {}) const;
  // Whether `wanted` fits Since: empty, or exactly ceil(size/8) bytes.
  bool FitsBitmap(std::string_view wanted) const {
    return wanted.empty() || wanted.size() == (size_ + 7) / 8;
  }

 private:
  size_t size_;
  std::unique_ptr<std::atomic<uint64_t>[]> words_;
  mutable Mutex mu_;
  // A thread in Since, woken by Set for a chunk it wants.
  struct Waiter {
    std::string_view wanted;
    std::condition_variable woken;
  };
  mutable std::vector<Waiter*> waiters_ GUARDED_BY(mu_);
  std::vector<uint32_t> log_ GUARDED_BY(mu_);  // in the order they were added
};

}  // namespace seedd
