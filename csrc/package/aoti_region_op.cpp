#include "package/aoti_region_op.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <fmt/format.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "exec/first_line.h"
#include "opara/error.h"

namespace opara {
namespace {

// A file of our own holding `bytes` while it exists (mkstemp: no other user reads a library that
// will run), removed when it goes.
class PrivateFile {
 public:
  PrivateFile(const std::string& bytes, const std::string& name) {
    std::string pattern = (std::filesystem::temp_directory_path() / "opara-region-XXXXXX.pt2").string();
    const int fd = mkstemps(pattern.data(), 4);
    if (fd < 0) throw Error(fmt::format("{}: no temporary file for its AOTInductor package", name));
    close(fd);
    path_ = pattern;
    std::ofstream out(path_, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw Error(fmt::format("{}: its AOTInductor package could not be written to {}", name, path_));
  }
  PrivateFile(const PrivateFile&) = delete;
  PrivateFile& operator=(const PrivateFile&) = delete;
  ~PrivateFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

AotiRegionOp::AotiRegionOp(const std::string& region_package, c10::Device device, std::string name)
    : device_(device), name_(std::move(name)) {
  const PrivateFile file(region_package, name_);
  try {
    // The single-threaded runner on CUDA: the threaded one polls events (cudaEventQuery), which a
    // capture refuses.
    loader_ = std::make_shared<torch::inductor::AOTIModelPackageLoader>(
        file.path(), "model", /*run_single_threaded=*/device.is_cuda(), /*num_runners=*/1,
        device.is_cuda() ? device.index() : c10::DeviceIndex{-1});
  } catch (const std::exception& error) {
    throw Error(fmt::format("{}: AOTInductor could not load it ({}); make the package again with opara.package", name_,
                            first_line(error)));
  }
}

void AotiRegionOp::run(std::vector<c10::IValue>& stack) const {
  std::vector<at::Tensor> inputs;
  inputs.reserve(stack.size());
  for (const c10::IValue& value : stack) inputs.push_back(value.toTensor().contiguous());
  void* stream = nullptr;
  if (device_.is_cuda()) stream = c10::impl::getDeviceGuardImpl(device_.type())->getStream(device_).native_handle();
  std::vector<at::Tensor> outputs = loader_->run(inputs, stream);
  stack.assign(outputs.begin(), outputs.end());
}

std::shared_ptr<const NodeOp> AotiRegionOp::to(c10::Device device) const {
  if (device.type() != device_.type()) {
    throw Error(fmt::format("{}: compiled by AOTInductor for {}, it cannot run on {}; make the package for {}", name_,
                            device_.str(), device.str(), device.str()));
  }
  return std::make_shared<AotiRegionOp>(*this);
}

}  // namespace opara
