from __future__ import annotations

import sys
from pathlib import Path

# tests/helpers.py is shared by every test folder
sys.path.insert(0, str(Path(__file__).resolve().parent))
