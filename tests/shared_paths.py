"""Where the shared reference captures live: ``../shared/captures`` beside the checkout
(the project's layout), or ``$TAILTAP_SHARED_CAPTURES``."""

from __future__ import annotations

import os
from pathlib import Path

CAPTURES = Path(os.environ.get("TAILTAP_SHARED_CAPTURES") or Path(__file__).resolve().parents[2] / "shared" / "captures")
