# -*- Python -*-
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "meshfold"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.meshfold_obj_root, "test")

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%examples", os.path.join(config.meshfold_src_root, "python-free-examples")))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))

llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP", "CXX"])
llvm_config.use_default_substitutions()

tool_dirs = [config.meshfold_tools_dir, config.llvm_tools_dir]
tools = ["meshfold-opt", "meshfold-compile", "meshfold-import-hf",
         "meshfold-gen-weights", "meshfold-reference", "meshfold-compare"]
llvm_config.add_tool_substitutions(tools, tool_dirs)
llvm_config.with_environment("PATH", config.meshfold_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

if config.meshfold_have_cuda:
    config.available_features.add("cuda")
