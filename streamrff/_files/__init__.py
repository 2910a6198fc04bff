"""Safe files: atomic publication, bounded reads, chunk checks, locks and the signed zarr-group writer.

Private API. What every file format and checkpoint needs to write without leaving a half-written file
and to read a hostile file without trusting its sizes. Imports only the foundations and one another.
"""
