"""``python -m spreeze_like`` is ``python -m spreeze_like.run``."""

import sys

from spreeze_like.run import main

sys.exit(main())
