"""Plumbing shared by the suite's long-running jobs (classification, search, GAN, reproduction).

One home for each mechanism, importing only torch at import time (torchvision, scikit-learn
and matplotlib are imported by the functions that need them):

* :mod:`.config`: run configurations as frozen dataclasses, the command line derived from
  their fields, range checks, JSON save/load and resume-with-overrides;
* :mod:`.files`: atomic writes, JSON/JSONL reading with errors that name file and line,
  ``weights_only`` checkpoint loading;
* :mod:`.rundir`: output folders owned by one run (refused when not empty without resume,
  locked against a second writer);
* :mod:`.distributed`: the process's place in a ``torchrun`` job;
* :mod:`.data`: the embedded digits, CIFAR-10 and ImageNet folders, one loader each;
* :mod:`.tables`: the paper's numbers as typed records, rendered to markdown and PNG;
* :mod:`.progress`: durations, and progress lines with rate and ETA;
* :mod:`.seeding`: seeding every random number generator a run uses.
"""
