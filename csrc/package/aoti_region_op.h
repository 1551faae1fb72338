#pragma once

// A package's region as a node: AOTInductor's runner of the region's compiled code.

#include <c10/core/Device.h>

#include <memory>
#include <string>

#include "exec/node_op.h"

namespace torch::inductor {
class AOTIModelPackageLoader;
}

namespace opara {

class AotiRegionOp final : public NodeOp {
 public:
  // Loads the region's AOTInductor package (`region_package`: its bytes, written to a private
  // temporary file while AOTInductor unpacks it) for `device`. `name` stands for it in errors.
  AotiRegionOp(const std::string& region_package, c10::Device device, std::string name);

  // Runs the region on the current stream of the device (on CUDA, the stream opara gives the node:
  // its allocations land in the capture's pool). Inputs in another layout are made contiguous, the
  // layout the region was compiled for.
  void run(std::vector<c10::IValue>& stack) const override;

  // The same runner: a region runs on the device it was compiled for.
  [[nodiscard]] std::shared_ptr<const NodeOp> to(c10::Device device) const override;

 private:
  std::shared_ptr<torch::inductor::AOTIModelPackageLoader> loader_;
  c10::Device device_;
  std::string name_;
};

}  // namespace opara
