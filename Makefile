# seedd: `make demo` and `make test` do all set-up on a fresh Debian 12 machine.
JOBS ?= 2
# Cache hits across checkouts in other folders (CI builds a fresh clone).
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1
BUILD ?= build
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo
FUZZ_SECONDS ?= 10

.PHONY: all deps demo-deps test-deps build python wheel deb image install test fuzz-build fuzz-smoke asan-test tsan-test demo bench fuzz format clean

all: build

# What building needs; `make demo` and `make test` add the servers they start.
deps:
	@bash scripts/setup.sh build
demo-deps:
	@bash scripts/setup.sh demo
test-deps:
	@bash scripts/setup.sh test

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# The Python package, importable with PYTHONPATH=$(BUILD)/python (built by
# `make build` too).
python: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target seedd_python

# The binaries, libseedd (headers, seedd.pc), the systemd unit and an example
# configuration under $(PREFIX); DESTDIR=... stages them for a package.
# A wheel for CPython 3.9+ in dist/: pip install --no-index --find-links dist seedd
wheel: python
	python3 scripts/build_wheel.py $(BUILD) dist

# A Debian package in dist/ (the daemon, CLI, library, headers, pkg-config
# file, systemd unit, sysusers file, Python package): apt-get install ./dist/seedd_*.deb
deb: build
	cd $(BUILD) && cpack -G DEB -B $(CURDIR)/$(BUILD)/cpack > /dev/null
	mkdir -p dist && cp $(BUILD)/cpack/seedd_*.deb dist/
	@ls dist/seedd_*.deb

# The container image seedd:VERSION (and :latest) in the local container
# storage, built with buildah from packaging/Containerfile.
image: build
	bash packaging/image/build.sh $(BUILD)/bin $(BUILD)/image

PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# Every test: unit, integration, end to end, interop; each fuzz target for
# $(FUZZ_SECONDS) s; the unit, transport and store tests again under ASan+UBSan.
# The fuzz build (clang, ASan+UBSan, -Wthread-safety) holds both the fuzz
# targets and the sanitizer tests, so the library is compiled twice, not three
# times.
test: test-deps build
	cd $(BUILD) && ctest --output-on-failure --timeout 600
	$(MAKE) fuzz-smoke
	$(MAKE) asan-test

# The unit, transport and store tests under AddressSanitizer and
# UndefinedBehaviorSanitizer (clang), in the fuzz build.
asan-test: fuzz-build
	cd build-fuzz && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure --timeout 900

# ThreadSanitizer over the concurrent code (not part of `make test`: GCC's TSan
# does not model the fences Asio uses, so it is a tool for changes to threading).
tsan-test: test-deps
	cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSEEDD_BENCH=OFF \
	  -DCMAKE_CXX_FLAGS="-fsanitize=thread -O1 -Wno-tsan" -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread
	cmake --build build-tsan -j $(JOBS) --target seedd_unit_tests seedd_transport_tests
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -R "^(unit|transport)[.]"

build-fuzz/build.ninja: | test-deps
	CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSEEDD_FUZZ=ON

fuzz-build: test-deps build-fuzz/build.ninja
	cmake --build build-fuzz -j $(JOBS)

fuzz-smoke: fuzz-build
	bash fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

fuzz:
	$(MAKE) fuzz-smoke FUZZ_SECONDS=60

demo: demo-deps build
	bash scripts/demo.sh $(BUILD)/bin

bench: test-deps build
	bash bench/run.sh $(BUILD)/bin
	bash bench/stores.sh $(BUILD)/bin
	bash bench/warmup.sh $(BUILD)/bin
	bash bench/weights.sh $(BUILD)/bin
	bash bench/small_files.sh $(BUILD)/bin
	bash bench/fanout.sh $(BUILD)/bin
	bash bench/zones.sh $(BUILD)/bin
	bash bench/origins.sh $(BUILD)/bin
	bash bench/origins_fleet.sh $(BUILD)/bin
	bash bench/origins_ranges.sh $(BUILD)/bin
	bash bench/engine_caches.sh $(BUILD)/bin
	bash bench/load_while_pulling.sh $(BUILD)/bin
	bash bench/ready.sh $(BUILD)/bin
	bash bench/startup.sh $(BUILD)/bin

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD) build-fuzz build-tsan
