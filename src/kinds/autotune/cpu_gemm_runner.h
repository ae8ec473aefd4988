// The cpu-gemm runner (see runner.h). Thread safety: one Run at a time.
#pragma once

#include <atomic>

#include "kinds/autotune/runner.h"

namespace seedd {

class CpuGemmRunner final : public AutotuneRunner {
 public:
  explicit CpuGemmRunner(std::vector<GemmShape> shapes) : shapes_(std::move(shapes)) {}

  std::string name() const override { return "cpu-gemm"; }
  Json Configuration() const override;
  Json EnvironmentMetadata() const override;
  Status Run(ArtifactStore& disk, const ArtifactKey& key, const AutotuneRunContext& ctx) override;

  // Candidate kernels timed so far (0 when a loaded table covered every shape).
  int kernels_timed() const { return kernels_timed_; }
  // The table entry key of a shape: "('sgemm', 'cpu_gemm', ((M, K), (K, N)), ())".
  static std::string EntryKey(const GemmShape& s);

 private:
  std::vector<GemmShape> shapes_;
  std::atomic<int> kernels_timed_{0};
};

}  // namespace seedd
