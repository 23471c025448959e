"""The ordinance as quoted in every report: Glencoe City Code section 701, subd. 1 P and
subd. 5 (transcription in ordinance-chapter-7.txt, spelling kept)."""

SOURCE = "City of Glencoe, Minnesota, City Code chapter 7, section 701"

SUBD_1_P = (
    "P. Unreasonably Disturb the Peace and Quiet includes, but is not limited to, the creation "
    "of any noise by any animal which can be heard by any person, including animal control "
    "officers, environmental health officers, or license peace officers, from a location "
    "outside of the building or premises where the animal is being kept and which animal "
    "noise occurs either: (1) repeatedly over at least a seven minute period of time or (2) "
    "intermittent barking that continues for more than one hour and is plainly audible from "
    "a distance of 100 feet or more from the premises where the dog is kept.")

SUBD_5 = (
    "Subdivision 5. Barking Dogs. It shall constitute a nuisance and be unlawful if any dog "
    "barks, whines, howls, bays, cries or makes other noise excessively so as to cause "
    "annoyance, disturbance or discomfort to any individual provided that such noise lasts "
    "for a period of more than seven minutes continuously or intermittent barking that "
    "continues for more than one hour and is plainly audible from a distance of 100 feet or "
    "more from the premises where the dog is kept. It shall not be a violation of this "
    "section if the dog was barking, crying, or making other noise due to harassment or "
    "injury to the dog or a trespass upon the premises where the dog is located.")

PENALTY = "Penalty. A first time violation of this section shall be deemed a petty misdemeanor."

SEIZURE_INTRO = (
    "Seizure of Barking Dog Noise Abatement. Any police officer or animal control officer "
    "may enter onto private property and seize any barking dog, provided that the following "
    "conditions exist:")

CROSS_REFERENCE_NOTE = (
    "Condition 2 refers to \"the criteria set forth in Subdivision 6.A\"; subdivision 6 of the "
    "transcription concerns interfering with the animal control officer, so this report reads "
    "the reference as the criteria of subdivision 5 above.")
