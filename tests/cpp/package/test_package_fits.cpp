// Whether a package fits this process: each misfit named with what differs and how to remake it
// (package_misfit). The loader's own refusals, through opara.load, are in
// tests/python/test_package.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "package/package_fits.h"

namespace opara {
namespace {

using ::testing::HasSubstr;

PackageInfo cpu_package() {
  PackageInfo info;
  info.name = "model";
  info.opara_version = "0.1.0";
  info.torch_version = "2.11.0+cpu";
  info.device = "cpu";
  info.cpu_isa = "avx512 avx512_vnni";
  return info;
}

PackageHost avx512_host() {
  PackageHost host;
  host.opara_version = "0.1.0";
  host.torch_version = "2.11.0+cu130";
  host.cpu_flags = {"avx2", "fma3", "avx512_f", "avx512_dq", "avx512_vl", "avx512_bw", "avx512_vnni"};
  return host;
}

TEST(PackageFits, APackageMadeForThisProcessFits) {
  EXPECT_EQ(package_misfit(cpu_package(), avx512_host()), "");
  PackageInfo plain = cpu_package();
  plain.cpu_isa = "";  // no vector ISA: any CPU
  PackageHost old_cpu = avx512_host();
  old_cpu.cpu_flags.clear();
  EXPECT_EQ(package_misfit(plain, old_cpu), "");
}

TEST(PackageFits, AnotherReleaseIsNamed) {
  PackageInfo info = cpu_package();
  info.opara_version = "0.0.9";
  EXPECT_THAT(package_misfit(info, avx512_host()), HasSubstr("made by opara 0.0.9, and this is opara 0.1.0"));
  info = cpu_package();
  info.torch_version = "2.15.0+cpu";
  EXPECT_THAT(package_misfit(info, avx512_host()),
              HasSubstr("made with torch 2.15.0+cpu, and this process runs torch 2.11.0+cu130"));
  EXPECT_EQ(torch_release("2.11.0+cu130"), "2.11.0");
}

TEST(PackageFits, AnotherDeviceOrCapabilityIsNamed) {
  PackageInfo info = cpu_package();
  info.device = "cuda";
  info.cuda_capability = "9.0";
  EXPECT_THAT(package_misfit(info, avx512_host()), HasSubstr("made for a CUDA GPU, and none is visible here"));
  PackageHost gpu = avx512_host();
  gpu.has_cuda = true;
  gpu.cuda_capability = "8.0";
  EXPECT_THAT(package_misfit(info, gpu), HasSubstr("made for CUDA compute capability 9.0, and this GPU has 8.0"));
  gpu.cuda_capability = "9.0";
  EXPECT_EQ(package_misfit(info, gpu), "");
  info.device = "mps";
  EXPECT_THAT(package_misfit(info, gpu), HasSubstr("made for device mps"));
}

TEST(PackageFits, ACpuWithoutTheKernelsIsaIsNamed) {
  PackageHost avx2 = avx512_host();
  avx2.cpu_flags = {"avx2", "fma3"};
  EXPECT_THAT(package_misfit(cpu_package(), avx2),
              HasSubstr("compiled for avx512 avx512_vnni (avx512_f), which this CPU lacks"));
  PackageHost no_vnni = avx512_host();
  no_vnni.cpu_flags.pop_back();
  EXPECT_THAT(package_misfit(cpu_package(), no_vnni), HasSubstr("(avx512_vnni), which this CPU lacks"));
  EXPECT_EQ(cpu_flags_of_isa("avx2"), (std::vector<std::string>{"avx2", "fma3"}));
}

TEST(StoredChoice, KeptOnThisMachineItHoldsUnlessTheCallerChangesHowTheScheduleIsChosen) {
  PackageInfo info = cpu_package();
  info.options = {{"device", "cpu"}, {"cpu_tuning_ms", "50"}, {"kernels", "inductor"}};
  EXPECT_EQ(stored_choice_misfit(info, {}, "16 CPUs"), "none kept");
  info.choice = StoredChoice{"16 CPUs", {{"intra_op_threads", "1"}, {"max_streams", "3"}}};
  EXPECT_EQ(stored_choice_misfit(info, {}, "16 CPUs"), "");
  EXPECT_EQ(stored_choice_misfit(info, {}, "8 CPUs"), "measured on 16 CPUs, and this is 8 CPUs");
  // The package's own options again, or options that do not decide the schedule: it holds.
  EXPECT_EQ(stored_choice_misfit(info, info.options, "16 CPUs"), "");
  EXPECT_EQ(stored_choice_misfit(info, {{"outputs", "view"}, {"warmup_runs", "5"}}, "16 CPUs"), "");
  // Another tuning budget, a cap, threads or a memory budget of the caller's: timed again.
  EXPECT_EQ(stored_choice_misfit(info, {{"cpu_tuning_ms", "10"}}, "16 CPUs"), "the caller sets cpu_tuning_ms");
  EXPECT_EQ(stored_choice_misfit(info, {{"max_streams", "2"}}, "16 CPUs"), "the caller sets max_streams");
  EXPECT_EQ(stored_choice_misfit(info, {{"memory_budget", "2x"}}, "16 CPUs"), "the caller sets memory_budget");
}

}  // namespace
}  // namespace opara
