"""Server-side diagnosis: what the server did per stage, why it saturates, what a py-spy recording says, whether the
machine was busy."""
