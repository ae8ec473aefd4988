#include "kinds/autotune/gemm.h"

#include <algorithm>
#include <cstring>

namespace seedd {

std::string GemmTactic::Name() const {
  std::string s = order == 0 ? "ijk" : "ikj";
  if (tile > 0) s += "_tile" + std::to_string(tile);
  if (row_block > 1) s += "_rows" + std::to_string(row_block);
  return s;
}

const std::vector<GemmTactic>& GemmTactics() {
  static const std::vector<GemmTactic> tactics = [] {
    std::vector<GemmTactic> t = {{0, 0, 1}, {1, 0, 1}, {1, 0, 4}};
    for (int tile : {32, 64, 128, 256}) {
      t.push_back({1, tile, 1});
      t.push_back({1, tile, 4});
    }
    return t;
  }();
  return tactics;
}

namespace {

void Naive(int m, int n, int k, const float* a, const float* b, float* c) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      float acc = 0;
      for (int p = 0; p < k; ++p) acc += a[i * k + p] * b[p * n + j];
      c[i * n + j] = acc;
    }
  }
}

// C[i0:i1, j0:j1] += A[i0:i1, p0:p1] * B[p0:p1, j0:j1], i-k-j order, rows of A
// taken `rows` at a time so each loaded row of B feeds several rows of C.
template <int kRows>
void Block(int n, int k, const float* a, const float* b, float* c, int i0, int i1, int p0, int p1,
           int j0, int j1) {
  int i = i0;
  for (; i + kRows <= i1; i += kRows) {
    for (int p = p0; p < p1; ++p) {
      float av[kRows];
      for (int r = 0; r < kRows; ++r) av[r] = a[(i + r) * k + p];
      const float* brow = b + p * n;
      for (int j = j0; j < j1; ++j) {
        const float bv = brow[j];
        for (int r = 0; r < kRows; ++r) c[(i + r) * n + j] += av[r] * bv;
      }
    }
  }
  for (; i < i1; ++i) {
    for (int p = p0; p < p1; ++p) {
      const float av = a[i * k + p];
      const float* brow = b + p * n;
      float* crow = c + i * n;
      for (int j = j0; j < j1; ++j) crow[j] += av * brow[j];
    }
  }
}

}  // namespace

void RunGemm(const GemmTactic& t, int m, int n, int k, const float* a, const float* b, float* c) {
  if (t.order == 0) {
    Naive(m, n, k, a, b, c);
    return;
  }
  std::memset(c, 0, sizeof(float) * static_cast<size_t>(m) * n);
  const int tile = t.tile > 0 ? t.tile : std::max({m, n, k});
  for (int i0 = 0; i0 < m; i0 += tile) {
    for (int p0 = 0; p0 < k; p0 += tile) {
      for (int j0 = 0; j0 < n; j0 += tile) {
        const int i1 = std::min(m, i0 + tile), p1 = std::min(k, p0 + tile),
                  j1 = std::min(n, j0 + tile);
        if (t.row_block == 4) {
          Block<4>(n, k, a, b, c, i0, i1, p0, p1, j0, j1);
        } else {
          Block<1>(n, k, a, b, c, i0, i1, p0, p1, j0, j1);
        }
      }
    }
  }
}

}  // namespace seedd
