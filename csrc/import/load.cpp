#include "opara/load.h"

#include <filesystem>
#include <fstream>
#include <memory>

#include "import/archive.h"
#include "import/exported_program_import.h"
#include "import/import_errors.h"
#include "import/torchscript_import.h"

namespace opara {
namespace {

void check_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  const auto status = fs::status(path, error);
  if (!fs::exists(status))
    fail_import(path, "no such file; check the path (opara's own test models are made by scripts/export_models.py)");
  if (fs::is_directory(status)) fail_import(path, "is a directory; give the path of a .pt or .pt2 file");
  if (!fs::is_regular_file(status)) fail_import(path, "is not a regular file");
  if (fs::file_size(path, error) == 0) fail_import(path, "the file is empty. Export the model again");
  if (!std::ifstream(path).good()) fail_import(path, "cannot be opened for reading; check its permissions");
}

// Both formats are zip archives: a torch.export one holds models/<name>.json, a TorchScript one
// holds code/ and constants.pkl. `name`: the file, or what stands for it.
ModelFormat format_of(caffe2::serialize::PyTorchStreamReader& reader, const std::string& name) {
  bool has_code = false;
  for (const std::string& record : reader.getAllRecords()) {
    if (record.rfind("models/", 0) == 0) return ModelFormat::kExportedProgram;
    has_code = has_code || record.rfind("code/", 0) == 0;
  }
  if (has_code && reader.hasRecord("constants.pkl")) return ModelFormat::kTorchScript;
  if (reader.hasRecord("data.pkl")) {
    fail_import(name,
                "a torch.save file (tensors or a state dict), not a model. Save the model with "
                "torch.jit.save(torch.jit.trace(model, inputs)) or torch.export.save");
  }
  fail_import(name, "a zip archive that holds no TorchScript code and no exported program");
}

}  // namespace

ModelFormat detect_format(const std::string& path) {
  check_file(path);
  return format_of(*open_archive(path), path);
}

Graph load(const std::string& path) {
  return detect_format(path) == ModelFormat::kTorchScript ? import_torchscript(path) : import_exported_program(path);
}

Graph load_exported_program(std::string archive, const std::string& name) {
  return import_exported_program_bytes(std::make_shared<const std::string>(std::move(archive)), name);
}

Graph load_archive(std::string archive, const std::string& name) {
  const auto bytes = std::make_shared<const std::string>(std::move(archive));
  const ModelFormat format = format_of(*open_archive_bytes(bytes, name), name);
  return format == ModelFormat::kTorchScript ? import_torchscript_bytes(bytes, name)
                                             : import_exported_program_bytes(bytes, name);
}

}  // namespace opara
