/* store.c -- being written */
