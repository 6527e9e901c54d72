import sys

from omni_grpc.cli import main

sys.exit(main())
