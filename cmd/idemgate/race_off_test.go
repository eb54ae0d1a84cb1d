//go:build !race

package main

// raceBuilt: this test binary is built with -race (see TestMain).
const raceBuilt = false
