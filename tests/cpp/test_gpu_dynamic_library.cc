// Loading a library at run time: the first candidate that opens wins, and every failure names
// what was tried. libm stands in for the GPU libraries, which this machine may lack.
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "gpu/dynamic_library.h"

namespace pscore::gpu {
namespace {

TEST(DynamicLibrary, OpensTheFirstCandidateThatLoads) {
  auto lib = DynamicLibrary::open_first({"/no/such/libfoo.so", "libm.so.6"}, "libm");
  EXPECT_EQ(lib.path(), "libm.so.6");
  double (*cosine)(double) = nullptr;
  bind_symbol(lib, cosine, "cos");
  EXPECT_DOUBLE_EQ(cosine(0.0), 1.0);
}

TEST(DynamicLibrary, NoCandidateLoadsNamesEveryOneTried) {
  try {
    DynamicLibrary::open_first({"/no/such/a.so", "libpscore_missing.so.9"}, "the thing");
    FAIL() << "no candidate exists";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("could not load the thing"), std::string::npos) << message;
    EXPECT_NE(message.find("/no/such/a.so"), std::string::npos) << message;
    EXPECT_NE(message.find("libpscore_missing.so.9"), std::string::npos) << message;
  }
}

TEST(DynamicLibrary, EmptyCandidateListIsAnError) {
  EXPECT_THROW(DynamicLibrary::open_first({}, "nothing"), Error);
}

TEST(DynamicLibrary, MissingSymbolNamesLibraryAndSymbol) {
  auto lib = DynamicLibrary::open_first({"libm.so.6"}, "libm");
  try {
    lib.symbol("pscore_no_such_symbol");
    FAIL() << "the symbol does not exist";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("libm.so.6"), std::string::npos) << message;
    EXPECT_NE(message.find("pscore_no_such_symbol"), std::string::npos) << message;
  }
}

TEST(DynamicLibrary, MovedFromOwnsNothing) {
  auto a = DynamicLibrary::open_first({"libm.so.6"}, "libm");
  DynamicLibrary b(std::move(a));
  EXPECT_EQ(b.path(), "libm.so.6");
  EXPECT_NE(b.symbol("sin"), nullptr);
}

}  // namespace
}  // namespace pscore::gpu
