"""Helpers shared by the search tests."""
import torch
import torch.nn.functional as F


def distinct_response(index: int) -> torch.Tensor:
    """A probe response that is no other index's layer (one-hot: far apart under any tolerance), so
    population tests can add many members built from one genome."""
    return F.one_hot(torch.tensor(index), 4096).double()
