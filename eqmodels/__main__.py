"""`python -m eqmodels image LO.uvfits [HI.uvfits ...] -o OUT.fits`."""

import sys

from ._cli import main


sys.exit(main())
