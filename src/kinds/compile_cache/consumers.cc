// Compile caches known by name (seedd/compile_cache.h): where each consumer
// keeps its cache and what of the engine's environment its entries depend on.
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "common/crypto.h"
#include "common/subprocess.h"
#include "seedd/compile_cache.h"
#include "seedd/json_text.h"

namespace seedd {
namespace {

// Runs in the engine's interpreter (Python 3.6 and later): versions are read
// from the installed distributions' metadata, or from the package's
// version.py, without importing the packages (importing torch takes seconds).
// Tools are asked for their version with a short timeout each.
constexpr std::string_view kProbe = R"PY(
import json, os, platform, subprocess, sys
import importlib.util
out = {"python": "%d.%d" % sys.version_info[:2], "machine": platform.machine()}
def version_py(module):
    try:
        spec = importlib.util.find_spec(module)
    except Exception:
        return None
    if spec is None or not spec.origin:
        return None
    ns = {}
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py")) as f:
            exec(f.read(), ns)
    except Exception:
        ns = {}
    return ns
def version(dists, module):
    try:
        from importlib import metadata
        for d in dists:
            try:
                return metadata.version(d)
            except Exception:
                pass
    except Exception:
        pass
    ns = version_py(module)
    if ns is None:
        return "none"
    return str(ns.get("__version__", "unknown"))
for key, dists, module in (("torch", ["torch"], "torch"), ("triton", ["triton"], "triton"),
                           ("vllm", ["vllm"], "vllm"),
                           ("flashinfer", ["flashinfer-python", "flashinfer"], "flashinfer"),
                           ("deep_gemm", ["deep_gemm", "deep-gemm"], "deep_gemm")):
    out[key] = version(dists, module)
ns = version_py("torch") if out["torch"] != "none" else None
out["torch_cuda"] = str(ns.get("cuda") or "none") if ns else "none"
def run(argv):
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=10)
        if p.returncode == 0:
            return p.stdout.decode("utf-8", "replace").strip()
    except Exception:
        pass
    return None
cxx = os.environ.get("CXX", "c++")
v = run([cxx, "-dumpfullversion", "-dumpversion"])
out["cxx"] = (os.path.basename(cxx) + " " + v.splitlines()[0]) if v else "none"
nvcc = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
v = run([nvcc if os.path.exists(nvcc) else "nvcc", "--version"])
out["nvcc"] = v.splitlines()[-1] if v else "none"
v = run(["nvidia-smi", "--query-gpu=compute_cap,name,driver_version", "--format=csv,noheader"])
parts = [p.strip() for p in v.splitlines()[0].split(",")] if v else []
out["gpu_arch"], out["gpu_name"], out["driver"] = (parts + ["none"] * 3)[:3] if len(parts) == 3 else ("none",) * 3
print(json.dumps(out))
)PY";

std::string Home(const EnvLookup& env) {
  if (std::optional<std::string> h = env("HOME")) return *h;
  if (const passwd* pw = ::getpwuid(::getuid()); pw != nullptr && pw->pw_dir != nullptr) {
    return pw->pw_dir;
  }
  return "/";
}

std::string UserName(const EnvLookup& env) {
  // As Python's getpass.getuser().
  for (const char* name : {"LOGNAME", "USER", "LNAME", "USERNAME"}) {
    if (std::optional<std::string> u = env(name)) return *u;
  }
  if (const passwd* pw = ::getpwuid(::getuid()); pw != nullptr && pw->pw_name != nullptr) {
    return pw->pw_name;
  }
  return std::to_string(::getuid());
}

std::string CacheHome(const EnvLookup& env) {
  if (std::optional<std::string> x = env("XDG_CACHE_HOME")) return *x;
  return Home(env) + "/.cache";
}

std::string Factor(const CompileFactors& f, const std::string& name) {
  auto it = f.find(name);
  return it == f.end() || it->second.empty() ? "none" : it->second;
}

// The consumer's own default directory when its variable is unset.
std::string DefaultDir(std::string_view name, const CompileFactors& probed, const EnvLookup& env) {
  if (name == "triton") {
    const std::optional<std::string> home = env("TRITON_HOME");
    return (home ? *home : Home(env)) + "/.triton/cache";
  }
  if (name == "inductor") {
    std::string tmp = "/tmp";
    for (const char* v : {"TMPDIR", "TEMP", "TMP"}) {
      if (std::optional<std::string> t = env(v)) {
        tmp = *t;
        break;
      }
    }
    std::string user = UserName(env);
    for (char& c : user) {
      if (std::string_view("\\/:*?\"<>|").find(c) != std::string_view::npos) c = '_';
    }
    return tmp + "/torchinductor_" + user;
  }
  if (name == "vllm") {
    const std::optional<std::string> root = env("VLLM_CACHE_ROOT");
    return (root ? *root : CacheHome(env) + "/vllm") + "/torch_compile_cache";
  }
  if (name == "flashinfer") {
    const std::optional<std::string> base = env("FLASHINFER_WORKSPACE_BASE");
    return (base ? *base : Home(env)) + "/.cache/flashinfer";
  }
  if (name == "deepgemm") return Home(env) + "/.deep_gemm";
  if (name == "cuda") return Home(env) + "/.nv/ComputeCache";
  // torch_extensions: torch.utils.cpp_extension.get_default_build_root() and
  // the py{major}{minor}_{cpu|cu{version}} folder _get_build_directory adds.
  std::string py = Factor(probed, "python");
  py.erase(std::remove(py.begin(), py.end(), '.'), py.end());
  std::string cuda = Factor(probed, "torch_cuda");
  cuda.erase(std::remove(cuda.begin(), cuda.end(), '.'), cuda.end());
  return CacheHome(env) + "/torch_extensions/py" + py + "_" +
         (cuda == "none" ? "cpu" : "cu" + cuda);
}

}  // namespace

const std::vector<KnownCompileCache>& KnownCompileCaches() {
  static const std::vector<KnownCompileCache> known = {
      {"triton",
       "TRITON_CACHE_DIR",
       "${TRITON_HOME:-$HOME}/.triton/cache",
       {"triton", "gpu_arch", "machine"}},
      {"inductor",
       "TORCHINDUCTOR_CACHE_DIR",
       "${TMPDIR:-/tmp}/torchinductor_$USER",
       {"torch", "triton", "torch_cuda", "gpu_arch", "python", "machine"}},
      {"vllm",
       "VLLM_CACHE_ROOT",
       "${XDG_CACHE_HOME:-$HOME/.cache}/vllm (its torch_compile_cache)",
       {"vllm", "torch", "triton", "torch_cuda", "gpu_arch", "python", "machine"}},
      {"flashinfer",
       "FLASHINFER_WORKSPACE_BASE",
       "$HOME (its .cache/flashinfer)",
       {"flashinfer", "torch", "torch_cuda", "nvcc", "cxx", "gpu_arch", "python", "machine"}},
      {"deepgemm",
       "DG_JIT_CACHE_DIR",
       "$HOME/.deep_gemm",
       {"deep_gemm", "nvcc", "gpu_arch", "machine"}},
      {"cuda", "CUDA_CACHE_PATH", "$HOME/.nv/ComputeCache", {"driver", "gpu_name", "gpu_arch"}},
      {"torch_extensions",
       "TORCH_EXTENSIONS_DIR",
       "${XDG_CACHE_HOME:-$HOME/.cache}/torch_extensions/py{XY}_{cpu|cu{CUDA}}",
       {"torch", "torch_cuda", "cxx", "python", "machine"}},
  };
  return known;
}

const KnownCompileCache* FindKnownCompileCache(std::string_view name) {
  for (const KnownCompileCache& k : KnownCompileCaches()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

EnvLookup ProcessEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  };
}

Result<CompileFactors> ProbeEngineEnvironment(const std::string& python,
                                              std::chrono::milliseconds timeout) {
  const std::string shown = "the engine's Python (" + python + ")";
  Result<CapturedRun> run = RunCapture({python, "-c", std::string(kProbe)}, timeout, 64 << 10);
  if (!run.ok()) {
    return Status::FailedPrecondition(
        shown + " could not report its environment: " + std::string(run.status().message()));
  }
  if (run->exit_code != 0) {
    return Status::FailedPrecondition(shown + " could not report its environment: it exited with " +
                                      std::to_string(run->exit_code));
  }
  Result<Json> j = ParseJson(run->out);
  if (!j.ok() || !j->is_object()) {
    return Status::FailedPrecondition(shown + " printed no JSON object");
  }
  CompileFactors out;
  for (auto it = j->begin(); it != j->end(); ++it) {
    if (!it->is_string() || it.key().size() > 64) continue;
    std::string v = it->get<std::string>().substr(0, 256);
    out[it.key()] = v.empty() ? "none" : v;
  }
  return out;
}

std::string DefaultCompileKey(std::string_view name, const CompileFactors& factors) {
  std::string text = "seedd compile_cache\n" + std::string(name) + "\n";
  for (const auto& [k, v] : factors) text += k + "=" + v + "\n";
  return Sha256Hex(text);
}

Result<CompileCacheSpec> KnownCompileCacheSpec(std::string_view name, const CompileFactors& probed,
                                               const EnvLookup& env) {
  const KnownCompileCache* known = FindKnownCompileCache(name);
  if (known == nullptr) {
    std::string names;
    for (const KnownCompileCache& k : KnownCompileCaches()) {
      names += (names.empty() ? "" : ", ") + std::string(k.name);
    }
    return Status::NotFound("no compile cache is known as '" + std::string(name) +
                            "' (known: " + names + "; name any other as NAME=DIR)");
  }
  CompileCacheSpec spec;
  spec.name = std::string(name);
  const std::optional<std::string> dir = env(std::string(known->env));
  if (name == "vllm" && dir) {
    spec.dir = *dir + "/torch_compile_cache";
  } else if (name == "flashinfer" && dir) {
    spec.dir = *dir + "/.cache/flashinfer";
  } else {
    spec.dir = dir ? *dir : DefaultDir(name, probed, env);
  }
  for (std::string_view f : known->factors)
    spec.factors[std::string(f)] = Factor(probed, std::string(f));
  spec.key = DefaultCompileKey(name, spec.factors);
  return spec;
}

}  // namespace seedd
