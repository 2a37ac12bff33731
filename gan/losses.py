"""BigGAN's hinge loss (Lim & Ye, 2017; Miyato et al., 2018)."""
import torch.nn.functional as F
from torch import Tensor


def discriminator_hinge_loss(real_logits: Tensor, fake_logits: Tensor) -> Tensor:
    """``mean(relu(1 - D(x))) + mean(relu(1 + D(G(z))))``."""
    return F.relu(1 - real_logits).mean() + F.relu(1 + fake_logits).mean()


def generator_hinge_loss(fake_logits: Tensor) -> Tensor:
    """``-mean(D(G(z)))``."""
    return -fake_logits.mean()
