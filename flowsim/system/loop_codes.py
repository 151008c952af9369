"""The codes of the compiled analytical loop's tables: op kinds, the columns of its op and
NPU tables, event kinds, policies, loop stages and status bits. Shared by the loop
(:mod:`._loop_kernels`, where Numba reads them as constants) and the Python that packs its
arrays and reads its results (:mod:`.loop_arrays`, :mod:`.analytical_loop`); no Numba here,
so that packing decisions cost no import.
"""

# op kinds
COMPUTE, COLLECTIVE, SEND, RECV = 0, 1, 2, 3
# columns of the static float op table
DURATION, GAP, UPDATE_DELAY, MESSAGE_NS = 0, 1, 2, 3
# columns of the static int op table
KIND, PROGRAM, ORDER, ROW, COL, SHAPE, POLICY, MAILBOX, SIZE = 0, 1, 2, 3, 4, 5, 6, 7, 8
#: how many columns the static op tables have (floats, ints)
OP_FLOATS, OP_INTS = MESSAGE_NS + 1, SIZE + 1
# columns of the float op state
END, SEEN, READY, PIPELINE, WAIT_BASE = 0, 1, 2, 3, 4
# columns of the int op state
REMAINING, HAS_PIPELINE, HAS_WAIT, EXPOSED_CHARGED = 0, 1, 2, 3
# columns of the per-NPU state
FREE, LOCAL_END, FINISH, NPU_COMPUTE, NPU_EXPOSED, NPU_BUBBLE = 0, 1, 2, 3, 4, 5
# layer tables
LAYER_COMPUTE, LAYER_EXPOSED, LAYER_COMM = 0, 1, 2
# timer events
PHASE_DONE, MESSAGE_ARRIVED = 0, 1
# scheduling policies
LIFO, FIFO, HIGHEST = 0, 1, 2
# stages of the loop: start the ops due, take the timer's events due, admit queued chunks
STARTING, EVENTS, ADMITTING = 0, 1, 2
# status bits (0: all is well; otherwise the Python engine reruns the case for its error)
SIZE_MISMATCH = 1
NOT_FINITE = 2
UNFINISHED = 4
UNRECEIVED = 8
