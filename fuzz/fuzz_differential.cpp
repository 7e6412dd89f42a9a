// libFuzzer on the differential harness: the input's bytes choose the shape and every operation;
// a divergence between the core and the reference model is printed and aborts.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "model/differential.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  creditloop::model::ByteSource source(data, size);
  const creditloop::model::DiffOptions options = creditloop::model::fuzz_options(source);
  const creditloop::model::DiffReport report = creditloop::model::run_differential(options, source);
  if (report.divergence) {
    std::fprintf(stderr, "divergence:\n%s\n", report.divergence->c_str());
    std::abort();
  }
  return 0;
}
