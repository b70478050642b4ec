# lit configuration: FileCheck tests of every stage of the pipeline, one folder per stage.
import os

import lit.formats

config.name = "npugrad"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".ll"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["lit.cfg.py", "Inputs"]
config.environment["PATH"] = os.environ.get("PATH", "")
for var in ("HOME", "PYTHONPATH", "VIRTUAL_ENV", "NPUGRAD_CACHE_DIR", "XDG_CACHE_HOME"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
# `FileCheck` is the Python filecheck package's `filecheck`.
config.substitutions.append(("FileCheck", "filecheck"))
config.substitutions.append(("%examples", os.path.join(os.path.dirname(__file__), "..", "..", "examples")))
# CPU descriptions for tests whose IR depends on the vector width: the same IR on any machine.
config.substitutions.append(("%inputs", os.path.join(os.path.dirname(__file__), "Inputs")))
