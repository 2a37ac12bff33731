"""BigGAN-deep with a swappable generator normalization-activation (paper Table 5).

    from evonorm_suite.gan.biggan_deep import Generator, GeneratorSpec, Discriminator
    G = Generator(GeneratorSpec(resolution=128), "evonorm_s0")   # any registered norm-act

Scripts: ``gan/train_biggan.py`` (training), ``gan/evaluate.py`` (IS/FID),
``gan/report.py`` (Table 5 form). See ``docs/gan.md``.
"""
