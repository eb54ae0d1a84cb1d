package sqlite

// Pending is the number of steps queued for, or running in, s's writer.
func Pending(s *Store) int64 { return s.w.pending.Load() }
