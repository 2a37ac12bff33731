"""Plumbing shared by the suite's long-running jobs (classification, search, GAN, reproduction).

One home for each mechanism, importing only torch at import time (torchvision, scikit-learn
and matplotlib are imported by the functions that need them):

* :mod:`.config`: run configurations as frozen dataclasses, the command line derived from
  their fields, range checks, JSON save/load, and what a resumed run may change (the options
  declared ``resumable``);
* :mod:`.files`: atomic writes, JSON/JSONL reading with errors that name file and line,
  ``weights_only`` checkpoint loading;
* :mod:`.rundir`: :func:`~.rundir.open_run`, the one call that opens a run in its folder (refused
  when not empty without resume, or on resume when it holds no run of the same command; locked
  against a second writer; the resolved configuration saved);
* :mod:`.grid`: the runner of the paper grids (resumable cells, ``--jobs``, per-cell logs);
* :mod:`.children`: child processes that die with their parent;
* :mod:`.distributed`: the process's place in a ``torchrun`` job;
* :mod:`.data`: the embedded digits, CIFAR-10 and ImageNet folders, one loader each;
* :mod:`.tables`: the paper's numbers as typed records, rendered to markdown and PNG;
* :mod:`.convergence`: whether a training curve has flattened (its last fifth's range and slope);
* :mod:`.progress`: durations, and progress lines with rate and ETA;
* :mod:`.verdicts`: the verdict rule of the reproduction report (one-sided t-tests, Holm's
  correction, gates, outcomes);
* :mod:`.seeding`: seeding every random number generator a run uses;
* :mod:`.cpu_load`: how busy other processes keep the CPUs (the benchmarks' header lines).
* :mod:`.library_warnings`: third-party libraries' warnings about their own code, silenced.
"""
