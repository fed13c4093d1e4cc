package livestream

// Attempts is how many attempts h holds.
func Attempts(h *Hub) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.attempts)
}
