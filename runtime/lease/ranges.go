package lease

// ranges is the set of address ranges held by outstanding leases:
// disjoint, non-empty [start, end), in an AVL tree ordered by start, so
// that adding, removing and the overlap check are O(log n).
type ranges struct {
	root *rangeNode
	n    int
}

type rangeNode struct {
	start, end  uintptr
	wrID        uint64
	left, right *rangeNode
	height      int
}

// overlap returns the wr_id of a range sharing a byte with [start, end).
// Of disjoint ranges only one can: the last to start before end, as it
// also ends last among those.
func (r *ranges) overlap(start, end uintptr) (uint64, bool) {
	var last *rangeNode
	for x := r.root; x != nil; {
		if x.start < end {
			last, x = x, x.right
		} else {
			x = x.left
		}
	}
	if last != nil && last.end > start {
		return last.wrID, true
	}
	return 0, false
}

// add inserts n (start, end and wrID set; it lives in the lease); the
// caller has checked overlap.
func (r *ranges) add(n *rangeNode) {
	n.left, n.right, n.height = nil, nil, 1
	r.root = insertRange(r.root, n)
	r.n++
}

// remove deletes the range starting at start, if there is one.
func (r *ranges) remove(start uintptr) {
	var found bool
	r.root, found = deleteRange(r.root, start)
	if found {
		r.n--
	}
}

func height(x *rangeNode) int {
	if x == nil {
		return 0
	}
	return x.height
}

func (x *rangeNode) fix() { x.height = 1 + max(height(x.left), height(x.right)) }

func rotateRight(x *rangeNode) *rangeNode {
	l := x.left
	x.left, l.right = l.right, x
	x.fix()
	l.fix()
	return l
}

func rotateLeft(x *rangeNode) *rangeNode {
	r := x.right
	x.right, r.left = r.left, x
	x.fix()
	r.fix()
	return r
}

// balance restores the AVL invariant at x after one insertion or deletion
// below it.
func balance(x *rangeNode) *rangeNode {
	x.fix()
	switch b := height(x.left) - height(x.right); {
	case b > 1:
		if height(x.left.left) < height(x.left.right) {
			x.left = rotateLeft(x.left)
		}
		return rotateRight(x)
	case b < -1:
		if height(x.right.right) < height(x.right.left) {
			x.right = rotateRight(x.right)
		}
		return rotateLeft(x)
	}
	return x
}

func insertRange(x, n *rangeNode) *rangeNode {
	if x == nil {
		return n
	}
	if n.start < x.start {
		x.left = insertRange(x.left, n)
	} else {
		x.right = insertRange(x.right, n)
	}
	return balance(x)
}

func deleteRange(x *rangeNode, start uintptr) (*rangeNode, bool) {
	if x == nil {
		return nil, false
	}
	var found bool
	switch {
	case start < x.start:
		x.left, found = deleteRange(x.left, start)
	case start > x.start:
		x.right, found = deleteRange(x.right, start)
	default:
		if x.left == nil {
			return x.right, true
		}
		if x.right == nil {
			return x.left, true
		}
		// Replace x by its successor, the leftmost node on the right.
		m := x.right
		for m.left != nil {
			m = m.left
		}
		x.right, _ = deleteRange(x.right, m.start)
		m.left, m.right = x.left, x.right
		return balance(m), true
	}
	return balance(x), found
}
