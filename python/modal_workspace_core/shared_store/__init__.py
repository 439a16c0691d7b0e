"""The shared store: the one place every gateway process of a deployment keeps what they must
all see (the OAuth server's clients, consents, codes and tokens), behind one small interface
(`interface.py`). On the local driver it is a SQLite file in the data root (`sqlite.py`); on Modal
a Volume written through the SDK's file API (`drivers/modal/volume_store.py`). Each driver says
which (`Driver.shared_store`).
"""

from __future__ import annotations

from .interface import SharedStore, check_folder, check_key
from .sqlite import SqliteStore

__all__ = ["SharedStore", "SqliteStore", "check_folder", "check_key"]
