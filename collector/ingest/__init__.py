"""Offline ingest of the files that kubectl, aws, gcloud, dmesg and job logs produce."""
