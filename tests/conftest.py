import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).parent))
torch.set_num_threads(1)
