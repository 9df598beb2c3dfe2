/* Generated from parsers/records.py (python -m parsers.records > parsers/records.h):
 * the layouts of the rows the C fast paths and the Python code share. Do not edit. */
#ifndef TAILTAP_RECORDS_H
#define TAILTAP_RECORDS_H
/* MessageColumn: the columns of a MessageRow (MESSAGE_ROW: native int64s) */
enum {
    MSG_STREAM_ID = 0,
    MSG_DIRECTION = 1,
    MSG_INDEX = 2,
    MSG_TS_NS = 3,
    MSG_SIZE = 4,
    MSG_FLAGS = 5,
    MSG_END_OFFSET = 6,
    MSG_NCOLS = 7
};
/* RunColumn: the columns of a ChunkRun row (int64s) */
enum {
    RUN_DIRECTION = 0,
    RUN_TS_NS = 1,
    RUN_FRAME_NO = 2,
    RUN_STREAM_OFFSET = 3,
    RUN_START = 4,
    RUN_END = 5,
    RUN_NCOLS = 6
};
#endif
