// Autotune runners: the warmup pass of the flashinfer_autotune kind. A runner
// loads this rank's on-disk table when present and compatible, tunes only what
// it lacks, and leaves the result in the disk store.
//
// Thread safety: a runner is used by one warmup at a time.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "seedd/artifact_store.h"
#include "seedd/json.h"
#include "seedd/status.h"

namespace seedd {

struct AutotuneRunContext {
  int64_t dp_rank = 0;
  int64_t rank = 0;
  // Set when the daemon is asked to stop: a runner returns Cancelled soon after.
  const std::atomic<bool>* cancel = nullptr;
  bool cancelled() const { return cancel != nullptr && cancel->load(std::memory_order_relaxed); }
};

class AutotuneRunner {
 public:
  AutotuneRunner() = default;
  AutotuneRunner(const AutotuneRunner&) = delete;
  AutotuneRunner& operator=(const AutotuneRunner&) = delete;
  virtual ~AutotuneRunner() = default;

  // "cpu-gemm" or "command:<program and args>".
  virtual std::string name() const = 0;
  // What the tuned table depends on; its SHA-256 is the default config_hash.
  virtual Json Configuration() const = 0;
  // This environment's _metadata: a saved table must match it to be used.
  virtual Json EnvironmentMetadata() const = 0;
  // Runs the pass for `key` in `disk` (load, tune what is missing, store).
  virtual Status Run(ArtifactStore& disk, const ArtifactKey& key,
                     const AutotuneRunContext& ctx) = 0;
};

using AutotuneRunnerPtr = std::unique_ptr<AutotuneRunner>;

struct GemmShape {
  int m = 0, n = 0, k = 0;
};

// Parses "MxNxK[,MxNxK...]" (each 1-4096).
Result<std::vector<GemmShape>> ParseGemmShapes(std::string_view text);
// The built-in shapes: a cold pass of 20-60 s on two cores.
std::vector<GemmShape> DefaultGemmShapes();

// The built-in runner: times real single-precision GEMM kernels per shape and
// records the fastest. kernels_timed() counts candidate timings (for tests).
class CpuGemmRunner;
std::unique_ptr<CpuGemmRunner> NewCpuGemmRunner(std::vector<GemmShape> shapes);

// "command:<program and args>": runs the program (split on spaces) with
// SEEDD_AUTOTUNE_TABLE=<path> (holding the current table when there is one),
// SEEDD_DP_RANK and SEEDD_RANK; the file it leaves is the tuned table. The
// program gets this process's environment without SEEDD_TOKEN, unless
// `pass_token`.
Result<AutotuneRunnerPtr> NewCommandRunner(std::string_view command, bool pass_token = false);

// Builds "cpu-gemm" or "command:..." by name.
Result<AutotuneRunnerPtr> NewAutotuneRunner(std::string_view spec, std::vector<GemmShape> shapes,
                                            bool pass_token = false);

}  // namespace seedd
