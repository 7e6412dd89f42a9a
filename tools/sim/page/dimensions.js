  // ---- layout (CSS pixels)
  const LABEL_W = 150, RIGHT_PAD = 12;
  const RULER_H = 26, PASS_H = 26, TOP_H = RULER_H + PASS_H + 8;
  const REQ_H = 50, BAL_H = 36, LANE_GAP = 14, LANE_H = REQ_H + BAL_H + LANE_GAP;
  const STRIP_H = 8;
  // A lane with more requests than this in view is drawn as per-pixel aggregates.
  const DETAIL_MAX = 800;
