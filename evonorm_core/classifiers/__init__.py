"""The classifiers that the layer search and the classification experiments share.

One module per concept; import them by name (this package's ``__init__`` imports nothing, and
``import evonorm_core`` does not import this package: its modules import torchvision, the
rest of the core needs only torch):

* :mod:`.models` builds the paper's ImageNet classifiers by name (:mod:`.resnet`,
  :mod:`.mbconv`, from the pieces in :mod:`.blocks`), :mod:`.anchors` the proxy task's CIFAR
  anchors from the same code;
* :mod:`.trainer` is the one training loop (:class:`~.trainer.Trainer`, in steps, at an
  absolute learning rate: :mod:`.optimizer`, :mod:`.schedule`), with in-memory batches and
  evaluation;
* :mod:`.data` holds the in-memory datasets (digits, MNIST, CIFAR-10), normalized;
* :mod:`.proxy_task` is how the anchors are trained on the proxy task, defined once.
"""
