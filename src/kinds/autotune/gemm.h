// Single-precision GEMM kernels (C = A * B, row-major) that the cpu-gemm runner
// tunes over: loop orders, cache tiles and register blocking. Pure functions.
#pragma once

#include <string>
#include <vector>

namespace seedd {

struct GemmTactic {
  int order;      // 0: i-j-k (naive), 1: i-k-j
  int tile;       // cache tile edge (0: untiled)
  int row_block;  // rows of A kept in registers per pass (1 or 4)
  std::string Name() const;
};

// Every candidate; tactic 0 is the naive loop.
const std::vector<GemmTactic>& GemmTactics();

// C (m x n) = A (m x k) * B (k x n). REQUIRES: sizes match.
void RunGemm(const GemmTactic& t, int m, int n, int k, const float* a, const float* b, float* c);

}  // namespace seedd
