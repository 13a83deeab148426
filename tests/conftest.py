"""Settings for the whole test session."""

from __future__ import annotations

import signal

# A suite started in the background by a shell without job control (`cmd &` in a script) inherits SIGINT
# ignored, and so would every process it starts: satpoint then never sees the Ctrl-C the tests send it.
# A handled signal is reset to its default in a child at exec, so a handler here gives the children theirs.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
