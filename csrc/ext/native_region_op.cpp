// torch.ops.opara.native_region: a region Inductor compiled with its C++ wrapper (kernels="inductor"
// on the CPU), called from C++ through the wrapper's entry function, without Python.
//
// The Python op opara::region runs a region through the dispatcher's Python kernel and Inductor's
// Python wrapper: about 25 us a call from a C++ worker, more than many fused regions take. The C++
// wrapper's library holds the whole region in one function,
//   void inductor_entry_impl(AtenTensorHandle* inputs, AtenTensorHandle* outputs)
// (inputs: the region's, then its frozen constants; handles stolen; outputs: new handles), which
// python/opara/_regions.py finds and registers here with the constants it reads and the outputs
// that alias an input (cloned: opara takes an op's results as new tensors).
//
// The entry releases the GIL at its start (py::gil_scoped_release_simple), so its caller must hold
// it: a worker takes it for that moment, and the kernels run without it. The GIL functions are
// declared weak so that the extension still loads where no Python is; only Python registers
// regions.
#include <ATen/core/Tensor.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>
#include <torch/library.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ext/keyed_registry.h"
#include "ext/region_inputs.h"
#include "opara/error.h"

extern "C" {
// Python's stable ABI; PyGILState_STATE is a C enum.
__attribute__((weak)) int PyGILState_Ensure();
__attribute__((weak)) void PyGILState_Release(int);
}

namespace opara::ext {
namespace {

// The mangled name of `void inductor_entry_impl(AtenTensorOpaque**, AtenTensorOpaque**)`.
constexpr const char* kEntrySymbol = "_Z19inductor_entry_implPP16AtenTensorOpaqueS1_";
using EntryFunction = void (*)(AtenTensorHandle*, AtenTensorHandle*);

class NativeRegion {
 public:
  NativeRegion(const std::string& library, std::int64_t inputs, std::vector<at::Tensor> constants, std::int64_t outputs,
               std::vector<std::int64_t> cloned)
      : library_(library),
        handle_(dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL)),
        inputs_(inputs),
        constants_(std::move(constants)),
        outputs_(outputs),
        cloned_(std::move(cloned)) {
    if (handle_ == nullptr)
      throw Error(fmt::format("opara: cannot load the region library {}: {}", library, dlerror()));
    entry_ = reinterpret_cast<EntryFunction>(dlsym(handle_, kEntrySymbol));
    if (entry_ == nullptr) {
      dlclose(handle_);
      throw Error(
          fmt::format("opara: the region library {} has no {} (Inductor's C++ wrapper entry)", library, kEntrySymbol));
    }
  }
  NativeRegion(const NativeRegion&) = delete;
  NativeRegion& operator=(const NativeRegion&) = delete;
  ~NativeRegion() { dlclose(handle_); }

  // `key`'s layouts (region_inputs.h) are those the entry reads.
  std::vector<at::Tensor> run(std::int64_t key, const std::vector<at::Tensor>& given) const {
    // The entry reads as many handles as it was compiled for: a count checked here, not a crash there.
    if (static_cast<std::int64_t>(given.size()) != inputs_) {
      throw Error(
          fmt::format("opara: the region compiled in {} takes {} inputs, not {}", library_, inputs_, given.size()));
    }
    const std::vector<at::Tensor> inputs = region_inputs(key, given);
    if (PyGILState_Ensure == nullptr) throw Error("opara: a region compiled by Inductor runs only in Python");
    std::vector<AtenTensorHandle> in;
    in.reserve(inputs.size() + constants_.size());
    for (const at::Tensor& tensor : inputs) in.push_back(torch::aot_inductor::new_tensor_handle(at::Tensor(tensor)));
    for (const at::Tensor& tensor : constants_)
      in.push_back(torch::aot_inductor::new_tensor_handle(at::Tensor(tensor)));
    std::vector<AtenTensorHandle> out(static_cast<std::size_t>(outputs_), nullptr);
    try {
      const Gil gil;
      entry_(in.data(), out.data());
    } catch (const std::exception& error) {
      for (AtenTensorHandle handle : out) {
        if (handle != nullptr) aoti_torch_delete_tensor_object(handle);
      }
      throw Error(fmt::format("opara: the region compiled in {} failed: {}", library_, error.what()));
    }
    std::vector<at::Tensor> results;
    results.reserve(out.size());
    for (AtenTensorHandle handle : out) {
      results.push_back(std::move(*torch::aot_inductor::tensor_handle_to_tensor_pointer(handle)));
      aoti_torch_delete_tensor_object(handle);
    }
    for (std::int64_t index : cloned_) {
      auto& result = results[static_cast<std::size_t>(index)];
      result = result.clone();
    }
    return results;
  }

 private:
  // Held while the entry starts and ends (it releases the GIL in between).
  struct Gil {
    Gil() : state(PyGILState_Ensure()) {}
    Gil(const Gil&) = delete;
    Gil& operator=(const Gil&) = delete;
    ~Gil() { PyGILState_Release(state); }
    int state = 0;
  };

  std::string library_;
  void* handle_;
  EntryFunction entry_ = nullptr;
  std::int64_t inputs_;
  std::vector<at::Tensor> constants_;
  std::int64_t outputs_;
  std::vector<std::int64_t> cloned_;
};

// Regions by the key Python gives them (opara/_regions.py, the same as its fake kernel's).
KeyedRegistry<const NativeRegion>& registry() {
  static KeyedRegistry<const NativeRegion> regions;
  return regions;
}

void register_native_region(std::int64_t key, const std::string& library, std::int64_t inputs,
                            std::vector<at::Tensor> constants, std::int64_t outputs, std::vector<std::int64_t> cloned) {
  for (std::int64_t index : cloned) {
    if (index < 0 || index >= outputs) {
      throw Error(fmt::format("opara: native region {}: output {} to clone is not one of its {}", key, index, outputs));
    }
  }
  registry().add(
      key, std::make_shared<const NativeRegion>(library, inputs, std::move(constants), outputs, std::move(cloned)));
}

void unregister_native_region(std::int64_t key) {
  registry().remove(key);
}

std::vector<at::Tensor> native_region(std::int64_t key, const std::vector<at::Tensor>& inputs) {
  const auto region = registry().find(key);
  if (!region) throw Error(fmt::format("opara: no native region {} is registered (its compiled model was freed)", key));
  return region->run(key, inputs);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(opara, m) {
  m.def("native_region(int key, Tensor[] inputs) -> Tensor[]");
  m.impl("native_region", c10::DispatchKey::CompositeExplicitAutograd, TORCH_FN(native_region));
  m.def("register_native_region(int key, str library, int inputs, Tensor[] constants, int outputs, int[] cloned) -> ()",
        &register_native_region);
  m.def("unregister_native_region(int key) -> ()", &unregister_native_region);
}

}  // namespace opara::ext
