"""What a person sees while npu-rl works: a progress line, one line per event that matters, and the
whole raw stream of the processes behind it in the run's ``console.log``.

    lines      reading the raw stream: verl's step lines, checkpoints, exceptions, warnings
    noise      the lines npu-rl hides from the terminal, each with why that is safe
    train      the training console: live bar on a terminal, plain lines in pods and pipes
    progress   a progress display for long work without steps (verl's model merger)
    ticks      time as shown, and a callback every few seconds while a block runs
"""
