"""`python -m hybridgen`: import-gguf (GGUF -> HF checkpoint dir) and run (text in, tokens out)."""

import sys

from hybridgen.models.cli import main

if __name__ == "__main__":
    sys.exit(main())
