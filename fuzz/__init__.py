"""Coverage-guided fuzzing of the parsers (atheris): ``python -m fuzz TARGET [-runs=N]``;
``make fuzz`` runs every target. Only the documented input problems may come out of a
target (DecodeIssue records, CaptureFormatError for input that is no capture): any other
exception, a hang or a memory blow-up is a crash, and each crash found becomes a file in
fuzz/regressions/<target>/ that tests/test_fuzz.py replays."""
