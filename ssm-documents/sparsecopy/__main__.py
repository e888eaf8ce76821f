"""Entry point for ``python3 sparsecopy`` (a directory) and ``python3 sparsecopy.pyz`` (a zip).

Run that way, Python puts the directory or zip on sys.path and runs this file outside any
package, so the package's relative imports would fail. Registering the directory as the
``sparsecopy`` package first lets every other module stay a normal package module.
"""

import os
import sys
import types

if __package__:
    from .cli import main
else:
    _package = types.ModuleType("sparsecopy")
    _package.__path__ = [os.path.dirname(os.path.abspath(__file__))]
    sys.modules["sparsecopy"] = _package
    from sparsecopy.cli import main

sys.exit(main(sys.argv[1:]))
