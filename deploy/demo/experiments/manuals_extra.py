"""Training-only manual paragraphs for the demo reranker: made-up products,
none of which appear in the eval data; each paragraph's queries are answered
by it and by no other paragraph of its manual.

Tried once (2026-12-07, AMD EPYC; not in the generator): one group per query
(its paragraph, 3 other paragraphs of the manual, 2 of other extra manuals)
appended to rerank_train.jsonl, stage 2 of the demo recipe from the same
stage-1 checkpoint. Dev MRR@10 0.8632 / 0.8948 / 0.8461 / 0.8380 / 0.8457 at
200-1000 (without them: best 0.8799); best checkpoint on test 0.8387 (sheets
0.9567, manuals 0.4813; without them 0.8471). It did not help the manuals.
"""

EXTRA_MANUALS = [
    {
        "slug": "kestrel-v9-robot-vacuum",
        "title": "Kestrel V9 Robot Vacuum: User Manual",
        "paragraphs": [
            {
                "text": "The Kestrel V9 is a robot vacuum with 4,000 Pa of suction, a 350 ml dust bin and a 5,200 mAh battery that runs for up to 150 minutes on hard floors. It measures 34 cm across and only 9.5 cm tall, so it fits under most sofas and beds. A laser distance sensor on top maps each room, and the Kestrel V9 can store maps for up to four floors of your home.",
                "queries": [
                    "How strong is the suction on the Kestrel V9?",
                    "How long does the Kestrel V9 run on one charge?",
                    "Will the robot vacuum fit under my sofa?",
                    "How many floor maps can the vacuum remember?",
                    "What is the dust bin capacity of the robot?",
                ],
            },
            {
                "text": "Before first use, remove the foam blocks from the bumper and snap the two side brushes onto the pegs marked L and R. Place the charging dock against a wall with 0.5 m of clear space on each side and 1.5 m in front. Set the Kestrel V9 on the dock and let it charge for 5 hours before the first run. Then open the Kestrel app, hold the Home button for 3 seconds and pick your 2.4 GHz Wi-Fi network.",
                "queries": [
                    "How much clear space does the Kestrel V9 dock need?",
                    "How long should I charge it before the first clean?",
                    "Which side brush goes on which peg?",
                    "How do I connect the Kestrel V9 to Wi-Fi?",
                    "Does the vacuum work with a 5 GHz network?",
                ],
            },
            {
                "text": "Press the Power button once to start a full clean, and press the Home button to send the Kestrel V9 back to its dock. Press both buttons briefly together for a Spot clean of a 1.5 m square around the robot. The ring light glows solid white while cleaning, pulses orange when the battery is below 15 percent and flashes red when the robot is stuck. Max mode, chosen in the app, raises suction for thick carpets but is louder at 68 dB.",
                "queries": [
                    "How do I start a spot clean on the Kestrel V9?",
                    "What does a flashing red ring light mean on the Kestrel V9?",
                    "Why is the light on my robot vacuum pulsing orange?",
                    "How do I send the robot back to its base?",
                    "Is there a stronger setting for carpets?",
                ],
            },
            {
                "text": "Empty the dust bin after every run, tap the filter clean once a week and replace it every 3 months. Cut hair off the main roller brush with the small blade tucked into the bin lid. If the Kestrel V9 stops at stair edges that are not there, wipe the four cliff sensors underneath with a dry cloth. To reset the Kestrel V9, hold Power and Home together for 10 seconds until the ring light turns blue.",
                "queries": [
                    "How often should the Kestrel V9 filter be replaced?",
                    "How do I get tangled hair off the roller brush?",
                    "Why does the vacuum stop at edges where there are no stairs?",
                    "How do I factory reset the Kestrel V9?",
                    "Where is the hair-cutting blade kept?",
                ],
            },
            {
                "text": "The Kestrel V9 comes with a 2-year warranty on the robot and 1 year on the battery. The robot weighs 3.6 kg, and the dock accepts 100-240 V input. Do not use it on wet floors or to pick up liquids, lit cigarettes or ash. For help, email support@kestrelhome.example or call 0800 555 0190 on weekdays from 8:00 to 18:00.",
                "queries": [
                    "What is the warranty on the Kestrel V9 battery?",
                    "How heavy is the Kestrel V9?",
                    "Can the robot vacuum pick up ash from a fireplace?",
                    "What are the Kestrel support phone hours?",
                    "What voltage does the charging dock accept?",
                ],
            },
        ],
    },
    {
        "slug": "norvik-k2-kettle",
        "title": "Norvik K2 Electric Kettle: User Manual",
        "paragraphs": [
            {
                "text": "The Norvik K2 is a 1.7 litre cordless kettle with a brushed steel body and a 2,200 W concealed heating element. It offers five preset temperatures of 60, 70, 80, 90 and 100 °C for green tea, white tea, oolong, coffee and black tea. A keep-warm function holds the chosen temperature for up to 30 minutes. The Norvik K2 sits on a 360-degree swivel base with a 75 cm cord.",
                "queries": [
                    "How much water does the Norvik K2 hold?",
                    "What temperature settings does the kettle have?",
                    "How long does keep warm last on the Norvik K2?",
                    "What wattage is the kettle's heating element?",
                    "How long is the power cord on the base?",
                ],
            },
            {
                "text": "Before first use, fill the Norvik K2 to the MAX line, boil it and pour the water away; repeat this twice to remove any manufacturing residue. Never fill above MAX or below the MIN line, which marks 0.5 l. Peel the protective film off the base and place it on a flat, dry surface at least 20 cm from the edge of the counter. The first boil may give off a faint smell, which is normal.",
                "queries": [
                    "What should I do before using the Norvik K2 for the first time?",
                    "What is the smallest amount of water I can boil in the kettle?",
                    "Is a plastic smell during the first boil normal?",
                    "How far from the counter edge should the Norvik K2 base be?",
                    "How many times should I boil and throw away water at first?",
                ],
            },
            {
                "text": "Lift the Norvik K2 off the base, fill it through the flip lid and set it back down. Press the Power button, then tap the Temp button to cycle through the presets; the matching LED lights amber while heating and turns green when the water is ready. Hold Temp for 2 seconds to switch keep-warm on, shown by a steady blue light. The kettle beeps three times when it reaches the set temperature.",
                "queries": [
                    "How do I change the temperature on the Norvik K2?",
                    "What does a green LED on the kettle mean?",
                    "What does the steady blue light on the Norvik K2 indicate?",
                    "How many beeps does the kettle make when the water is ready?",
                    "How do I switch on the keep-warm function?",
                ],
            },
            {
                "text": "In hard-water areas, descale the Norvik K2 every 4 weeks: fill it to the MIN line with equal parts white vinegar and water, boil, and leave it for one hour before rinsing. The mesh limescale filter in the spout lifts out and can be rinsed under the tap. If the kettle switches off before boiling, it usually needs descaling. If all the lights flash red, it was switched on empty; let it cool for 10 minutes and it resets itself.",
                "queries": [
                    "How often should I descale the Norvik K2?",
                    "What mix of vinegar and water do I use for descaling?",
                    "Can the filter in the spout be taken out?",
                    "Why does my kettle turn off before the water boils?",
                    "What do flashing red lights on the Norvik K2 mean?",
                ],
            },
            {
                "text": "The Norvik K2 is covered by a 3-year warranty when registered within 30 days of purchase. The empty kettle weighs 1.2 kg. Never immerse the kettle or its base in water, and do not put either in the dishwasher. Keep the kettle out of reach of children under 8 and do not use it outdoors. For spare bases and filters, contact Norvik support at help@norvik.example.",
                "queries": [
                    "How long is the Norvik K2 warranty?",
                    "By when do I need to register the kettle for the warranty?",
                    "Can I wash the Norvik K2 in the dishwasher?",
                    "How much does the kettle weigh when empty?",
                    "Who do I contact for a replacement kettle base?",
                ],
            },
        ],
    },
    {
        "slug": "solenne-w4-smartwatch",
        "title": "Solenne W4 Smartwatch: User Manual",
        "paragraphs": [
            {
                "text": "The Solenne W4 is a smartwatch with a 1.4-inch AMOLED display, a 44 mm aluminium case and sensors for heart rate, blood oxygen and skin temperature. It tracks over 100 sport modes and has built-in GPS. Battery life is up to 10 days in typical use, or 18 hours with GPS always on. The Solenne W4 is water resistant to 5 ATM, which suits swimming but not diving.",
                "queries": [
                    "How big is the Solenne W4 screen?",
                    "Does the watch have GPS built in?",
                    "How many days does the Solenne W4 battery last?",
                    "Can I go swimming with the Solenne W4?",
                    "What health sensors does the watch have?",
                ],
            },
            {
                "text": "To switch the Solenne W4 on for the first time, place it on the magnetic charging puck. Install the Solenne Fit app on a phone running Android 9 or iOS 14 or later, turn on Bluetooth and tap Add Device. Confirm the six-digit code shown on the watch face. The first pairing installs a firmware update that takes about 15 minutes, so keep the watch on the charger until it finishes.",
                "queries": [
                    "Which phones work with the Solenne W4?",
                    "What app do I need for the smartwatch?",
                    "How do I pair the Solenne W4 with my phone?",
                    "Why is my watch installing an update right after pairing?",
                    "How do I turn the watch on for the first time?",
                ],
            },
            {
                "text": "The Solenne W4 has two buttons: the top Crown button opens the app list and the lower Sport button starts a workout. Swipe down from the watch face for quick settings and up for notifications. A small green light on the back flashes while heart rate is being measured. Raise your wrist to wake the screen, or cover the display with your palm for 3 seconds to switch it off.",
                "queries": [
                    "Which button starts a workout on the Solenne W4?",
                    "How do I see my notifications on the watch?",
                    "Why is there a flashing green light on the back of my watch?",
                    "How do I turn the watch screen off quickly?",
                    "What does the Crown button on the Solenne W4 do?",
                ],
            },
            {
                "text": "If heart-rate readings on the Solenne W4 seem wrong, clean the sensor window with a soft cloth and wear the watch a finger's width above the wrist bone. Rinse the watch in fresh water after swimming in the sea or a chlorinated pool. If the watch freezes, hold the Crown button for 15 seconds to restart it. To erase all data before selling it, go to Settings > System > Reset and confirm.",
                "queries": [
                    "Why are my heart rate readings inaccurate?",
                    "Should I rinse the Solenne W4 after swimming in salt water?",
                    "My watch is frozen, how do I restart it?",
                    "How do I erase all data on the Solenne W4?",
                    "Where on the wrist should the watch sit?",
                ],
            },
            {
                "text": "The Solenne W4 charges from empty to full in about 2 hours using the supplied magnetic cable and any 5 V USB adapter. It weighs 36 grams without the strap, and its 22 mm quick-release pins fit most standard bands. The warranty is 1 year, extended to 2 years in the EU. Take the watch off if your skin becomes irritated, and contact care@solenne.example for repairs.",
                "queries": [
                    "How long does it take to fully charge the Solenne W4?",
                    "What strap width does the watch use?",
                    "How light is the Solenne W4?",
                    "Is the smartwatch warranty longer in the EU?",
                    "What should I do if the watch irritates my skin?",
                ],
            },
        ],
    },
    {
        "slug": "calder-buds-e3-earbuds",
        "title": "Calder Buds E3 Wireless Earbuds and Charging Case: User Manual",
        "paragraphs": [
            {
                "text": "The Calder Buds E3 are wireless earbuds with 10 mm drivers, active noise cancellation and Bluetooth 5.3. Each earbud plays for 7 hours per charge, and the charging case holds three more full charges for 28 hours in total. The case is 5.8 cm wide and supports both USB-C and Qi wireless charging. Three sizes of silicone ear tips, S, M and L, are included in the box.",
                "queries": [
                    "How many hours of playback do the Calder Buds E3 give per charge?",
                    "What is the total battery life including the case?",
                    "Can the Calder Buds E3 case charge wirelessly?",
                    "Which Bluetooth version do the earbuds use?",
                    "What ear tip sizes come with the earbuds?",
                ],
            },
            {
                "text": "To pair the Calder Buds E3 for the first time, open the case lid with both earbuds inside; the case LED flashes white. Select Calder Buds E3 in your phone's Bluetooth menu. To pair another device, hold the round button on the back of the case for 3 seconds until the LED flashes white again. Try each ear tip size and keep the one that seals without pressure.",
                "queries": [
                    "How do I pair the Calder Buds E3 with my phone?",
                    "How can I connect the earbuds to a second device?",
                    "What does a flashing white light on the earbuds case mean?",
                    "Where is the pairing button on the Calder Buds E3 case?",
                    "How do I choose the right ear tips?",
                ],
            },
            {
                "text": "Tap the right earbud twice to play or pause, and tap the left earbud twice to switch between noise cancelling and Transparency mode. Hold either earbud for 2 seconds to call your voice assistant. When you close the lid, the case LED shows the case battery: green above 50 percent, amber from 20 to 50 percent and red below 20 percent. The Calder Buds E3 pause music automatically when you take one out.",
                "queries": [
                    "How do I turn on Transparency mode on the Calder Buds E3?",
                    "How do I pause music with the earbuds?",
                    "What does an amber light on the Calder Buds E3 case mean?",
                    "How do I activate my voice assistant from the earbuds?",
                    "Does music stop when I remove an earbud?",
                ],
            },
            {
                "text": "Once a month, wipe the charging contacts inside the Calder Buds E3 case and on each earbud stem with a dry cotton swab; dirty contacts are the most common reason one earbud will not charge. The ear tips pull off and can be washed in mild soapy water, then dried fully. If one earbud has no sound, reset both: put them in the case, keep the lid open and hold the case button for 15 seconds until the LED flashes red three times.",
                "queries": [
                    "Why won't one of my earbuds charge?",
                    "Can I wash the silicone ear tips?",
                    "How do I reset the Calder Buds E3?",
                    "Only one earbud plays sound, what should I do?",
                    "How often should I clean the charging contacts?",
                ],
            },
            {
                "text": "The Calder Buds E3 carry a 1-year limited warranty, and a lost single earbud can be replaced for a fee through the Calder store. Each earbud weighs 4.9 g and the case weighs 42 g. The earbuds are rated IPX4 against sweat and splashes, but the case is not water resistant. Do not use noise cancellation while cycling or crossing roads, and find support at calderaudio.example/help.",
                "queries": [
                    "Can I buy a replacement for a lost earbud?",
                    "How much does each Calder Buds E3 earbud weigh?",
                    "Are the earbuds sweat resistant?",
                    "Is the Calder Buds E3 case waterproof?",
                    "What warranty comes with the Calder Buds E3?",
                ],
            },
        ],
    },
    {
        "slug": "nestwell-m6-baby-monitor",
        "title": "Nestwell M6 Baby Monitor: User Manual",
        "paragraphs": [
            {
                "text": "The Nestwell M6 is a video baby monitor with a 5-inch parent unit screen and a 1080p camera with night vision up to 8 metres. The camera pans 355 degrees and tilts 90 degrees, controlled from the parent unit. It works without Wi-Fi over an encrypted 2.4 GHz link with a range of up to 300 metres in open space. The Nestwell M6 camera also measures room temperature and humidity.",
                "queries": [
                    "Does the Nestwell M6 need Wi-Fi?",
                    "How far can the parent unit be from the camera?",
                    "How far does the night vision reach on the Nestwell M6?",
                    "Can I turn the camera remotely to look around the room?",
                    "What is the screen size of the parent unit?",
                ],
            },
            {
                "text": "Mount the Nestwell M6 camera on the wall with the bracket and two screws supplied, at least 1 metre from the cot so the cable is out of the baby's reach. Plug the camera and the parent unit into their adapters; they come paired from the factory. If the screen shows No Signal, hold the Pair button on the camera base for 5 seconds, then choose Menu > Add Camera on the parent unit. Up to four cameras can be linked to one parent unit.",
                "queries": [
                    "How far from the cot should the Nestwell M6 camera be mounted?",
                    "Do I need to pair the camera with the parent unit?",
                    "What should I do if the parent unit says No Signal?",
                    "How many cameras can one Nestwell M6 parent unit show?",
                    "How is the baby camera attached to the wall?",
                ],
            },
            {
                "text": "Press the Talk button on the side of the Nestwell M6 parent unit to speak to your baby. Five sound bars along the top of the screen light up green, then yellow and red, as the room gets louder. Press the Moon button to play one of five lullabies for up to 30 minutes. VOX mode turns the screen off while the nursery is quiet and wakes it when sound passes the level you choose.",
                "queries": [
                    "How do I talk to my baby through the Nestwell M6?",
                    "What do the coloured sound bars on the screen mean?",
                    "Can the baby monitor play lullabies?",
                    "What is VOX mode on the Nestwell M6?",
                    "How long do the lullabies play for?",
                ],
            },
            {
                "text": "Clean the Nestwell M6 camera lens with a dry microfibre cloth, and never spray liquid onto the camera or parent unit. If the night-vision picture looks washed out, move the camera so it does not face a window or lamp. If the picture freezes or the buttons stop responding, press the recessed Reset hole on the back of the parent unit with a paper clip. A beep every 30 seconds means the parent unit has lost contact with the camera.",
                "queries": [
                    "Why does the night vision image look washed out?",
                    "How do I reset the Nestwell M6 parent unit?",
                    "Why does the parent unit beep every 30 seconds?",
                    "Can I use a cleaning spray on the baby camera?",
                    "The monitor picture has frozen, what do I do?",
                ],
            },
            {
                "text": "The Nestwell M6 parent unit has a 4,000 mAh battery that lasts about 12 hours with the screen on, or 20 hours in VOX mode. The parent unit weighs 240 g and the camera 180 g. The warranty runs for 2 years from the date of purchase. This monitor is an aid and does not replace regular adult checks on your baby. Call 1-800-555-0144 for Nestwell support.",
                "queries": [
                    "How long does the Nestwell M6 parent unit battery last?",
                    "How much does the baby camera weigh?",
                    "What is the warranty period on the Nestwell M6?",
                    "Can the monitor replace checking on my baby in person?",
                    "What is the Nestwell support phone number?",
                ],
            },
        ],
    },
    {
        "slug": "drystone-h20-dehumidifier",
        "title": "Drystone H20 Dehumidifier: User Manual",
        "paragraphs": [
            {
                "text": "The Drystone H20 is a compressor dehumidifier that removes up to 20 litres of moisture per day at 30 °C and 80 percent humidity. It suits rooms of up to 40 square metres and works in temperatures between 5 and 35 °C. The water tank holds 3 litres, and a continuous drain outlet accepts a 12 mm hose. The Drystone H20 runs at 39 dB on its lowest fan speed.",
                "queries": [
                    "How much water can the Drystone H20 extract per day?",
                    "What size room is the dehumidifier suitable for?",
                    "How big is the water tank on the Drystone H20?",
                    "How loud is the Drystone H20?",
                    "Can I run the dehumidifier in a room colder than 5 °C?",
                ],
            },
            {
                "text": "Keep the Drystone H20 upright for at least 2 hours after delivery before switching it on, so the refrigerant can settle. Place it on a level floor with 20 cm of space on every side, and close the windows and doors of the room. Check that the tank is seated properly, or the Tank Full light will come on straight away. For continuous drainage, pull out the rubber plug at the back and push the hose on so that it runs downhill.",
                "queries": [
                    "How long should the Drystone H20 stand before I turn it on?",
                    "How do I attach a hose for continuous drainage?",
                    "How much space does the dehumidifier need around it?",
                    "Why is the Tank Full light on as soon as I switch it on?",
                    "Should the windows be open while the dehumidifier runs?",
                ],
            },
            {
                "text": "Press Mode on the Drystone H20 to choose Auto, Laundry or Sleep. Auto holds the humidity you set with the + and - buttons, from 35 to 80 percent in 5 percent steps; 50 percent suits most homes. Laundry runs the fan at full speed for 6 hours to dry clothes indoors, and Sleep dims the display and drops the fan to its lowest speed. The humidity light turns blue below 45 percent, green from 45 to 65 and red above 65.",
                "queries": [
                    "How do I set the target humidity on the Drystone H20?",
                    "Is there a mode for drying clothes indoors?",
                    "What humidity level should I choose for my home?",
                    "What does the red humidity light mean?",
                    "How long does Laundry mode run on the Drystone H20?",
                ],
            },
            {
                "text": "Empty and rinse the Drystone H20 tank at least once a week to stop mould. Every two weeks, slide out the air filter behind the front grille, wash it in lukewarm water and let it dry before refitting. If the unit stops collecting water in a cold room, it is probably defrosting, which takes up to 20 minutes while the Defrost light stays on. If it still collects nothing, check that the room humidity is above your target.",
                "queries": [
                    "How often should I wash the Drystone H20 filter?",
                    "Why has the dehumidifier stopped collecting water?",
                    "What does the Defrost light on the Drystone H20 mean?",
                    "Where is the air filter located?",
                    "How long does defrosting take?",
                ],
            },
            {
                "text": "The Drystone H20 carries a 2-year warranty on parts and a 5-year warranty on the compressor. It weighs 11.5 kg and has four wheels and a carry handle. It draws 240 W from a standard 230 V socket; do not use an extension lead. Never tilt the Drystone H20 more than 45 degrees while moving it, and find support at drystone.example/support.",
                "queries": [
                    "How long is the compressor warranty on the Drystone H20?",
                    "How much electricity does the dehumidifier use?",
                    "Can I plug the Drystone H20 into an extension cord?",
                    "How heavy is the dehumidifier?",
                    "How far can I tilt it when carrying it?",
                ],
            },
        ],
    },
    {
        "slug": "brackett-d18-cordless-drill",
        "title": "Brackett D18 Cordless Drill: User Manual",
        "paragraphs": [
            {
                "text": "The Brackett D18 is an 18 V cordless drill driver with a brushless motor and 60 Nm of maximum torque. It has a 13 mm keyless chuck, two speeds of 0-450 and 0-1,800 rpm, and 21 clutch settings plus a drill setting. The kit includes two 2.0 Ah batteries, a charger that fills a battery in 60 minutes and a carry case. The Brackett D18 accepts every battery in the Brackett 18 V range.",
                "queries": [
                    "How much torque does the Brackett D18 have?",
                    "What size is the drill's chuck?",
                    "How many clutch settings are there on the Brackett D18?",
                    "Which batteries fit the Brackett D18?",
                    "How long does a drill battery take to charge?",
                ],
            },
            {
                "text": "Slide a battery into the base of the Brackett D18 handle until it clicks. Before first use, charge each battery fully: the charger light flashes green while charging and stays solid green when done. To fit a bit, hold the chuck sleeve and twist it anticlockwise to open the jaws, insert the bit, then twist clockwise until the ratchet clicks. Fix the belt clip to the left or right side with the supplied screw.",
                "queries": [
                    "How do I insert a drill bit into the Brackett D18?",
                    "What does a flashing green light on the charger mean?",
                    "Should I charge the drill batteries before first use?",
                    "How do I attach the belt clip?",
                    "How do I fit the battery into the drill?",
                ],
            },
            {
                "text": "Set the Brackett D18 gear selector on top to 1 for screwdriving and 2 for drilling. Turn the clutch collar to a low number for small screws and raise it until the screw sits flush; the drill symbol disables the clutch. Push the direction switch from the right for forward and from the left for reverse, and leave it centred to lock the trigger. Press the gauge button on the battery to light up to three LEDs showing the charge left.",
                "queries": [
                    "Which gear should I use for drilling with the Brackett D18?",
                    "How do I make the drill run in reverse?",
                    "How do I lock the trigger on the Brackett D18?",
                    "What clutch setting should I use for small screws?",
                    "How can I check how much charge is left in the battery?",
                ],
            },
            {
                "text": "After use, blow dust out of the Brackett D18 air vents with dry compressed air and wipe the body with a damp cloth; never use solvents. If a bit slips in the chuck, open it fully, clean the jaws and retighten. If the drill stops under heavy load, the overload protection has tripped: release the trigger and start again. A battery that is too hot or too cold will not work until it returns to between 0 and 40 °C.",
                "queries": [
                    "How do I clean the Brackett D18 after use?",
                    "Why does my drill bit slip in the chuck?",
                    "Why did the drill stop suddenly while drilling into concrete?",
                    "My battery won't work after a night in a cold van, why?",
                    "Can I use solvent to clean the drill body?",
                ],
            },
            {
                "text": "The Brackett D18 has a 3-year warranty on the tool and 2 years on batteries and charger when registered online within 28 days. The drill weighs 1.4 kg on its own and 1.8 kg with a 2.0 Ah battery fitted. Wear eye protection and check walls for hidden pipes and cables before drilling. Store batteries indoors at about 50 percent charge, and visit brackett.example/service for repairs.",
                "queries": [
                    "What is the battery warranty on the Brackett D18?",
                    "How much does the drill weigh with a battery?",
                    "How should I store the drill batteries long term?",
                    "What safety gear should I wear when drilling?",
                    "Where do I send the Brackett D18 for repair?",
                ],
            },
        ],
    },
    {
        "slug": "pagewell-r5-ereader",
        "title": "Pagewell R5 E-Reader: User Manual",
        "paragraphs": [
            {
                "text": "The Pagewell R5 is an e-reader with a 7-inch, 300 ppi E Ink screen and an adjustable warm front light. It has 32 GB of storage, enough for about 20,000 books, and reads EPUB, PDF, MOBI and TXT files. The battery lasts up to 6 weeks at 30 minutes of reading a day. The Pagewell R5 is rated IPX8 and survives 60 minutes in 2 metres of fresh water.",
                "queries": [
                    "How many books can the Pagewell R5 hold?",
                    "What file formats does the e-reader support?",
                    "Can I read the Pagewell R5 in the bath?",
                    "How many weeks does the e-reader battery last?",
                    "What is the screen resolution of the Pagewell R5?",
                ],
            },
            {
                "text": "Hold the Power button on the bottom edge of the Pagewell R5 for 3 seconds to turn it on, then choose your language and join a Wi-Fi network. Sign in with a Pagewell account to sync purchases, or tap Skip to use it offline. To add your own books, connect it to a computer with the USB-C cable and drag the files into the Books folder. The first library scan can take a few minutes.",
                "queries": [
                    "How do I turn on the Pagewell R5?",
                    "Can I use the e-reader without an account?",
                    "How do I copy my own ebooks onto the Pagewell R5?",
                    "Which folder should book files go into?",
                    "Why is my library taking a while to appear the first time?",
                ],
            },
            {
                "text": "Tap the right side of the screen or press the lower page button to go forward, and tap the left side or press the upper button to go back. Swipe down from the top of the Pagewell R5 screen to open the quick menu, where the sun slider sets brightness and the flame slider sets warmth. Press and hold a word to see its dictionary definition. A small orange light next to the port shows the device is charging.",
                "queries": [
                    "How do I turn back a page on the Pagewell R5?",
                    "How do I make the reading light warmer?",
                    "How can I look up the meaning of a word?",
                    "What does the orange light beside the USB port mean?",
                    "Where do I change the screen brightness on the Pagewell R5?",
                ],
            },
            {
                "text": "If the Pagewell R5 screen shows faint traces of the previous page, turn on full refresh in Settings > Display so the screen flashes every 6 pages. Clean the screen with a dry microfibre cloth, and after contact with salt water or chlorine, rinse it in fresh water and dry it. If the device freezes, hold the Power button for 20 seconds to restart it. A factory reset, under Settings > Device > Reset, deletes all books not saved to your account.",
                "queries": [
                    "Why do I see ghost images of the previous page?",
                    "What should I do after the Pagewell R5 gets wet in the sea?",
                    "How do I restart a frozen e-reader?",
                    "Will a factory reset delete my books?",
                    "How do I clean the e-reader screen?",
                ],
            },
            {
                "text": "The Pagewell R5 charges fully in about 2.5 hours from a 5 V, 2 A USB adapter, which is sold separately. It weighs 195 grams and is 8 mm thick. The warranty lasts 1 year and covers the battery but not a cracked screen. Do not leave the Pagewell R5 in a hot car or direct sun above 45 °C, and contact Pagewell at help.pagewell.example.",
                "queries": [
                    "How long does the Pagewell R5 take to charge?",
                    "Is a wall charger included with the Pagewell R5?",
                    "Does the e-reader warranty cover a broken screen?",
                    "How thin is the e-reader?",
                    "Can I leave the e-reader in a hot car?",
                ],
            },
        ],
    },
    {
        "slug": "harbor-p12-power-station",
        "title": "Harbor P12 Portable Power Station: User Manual",
        "paragraphs": [
            {
                "text": "The Harbor P12 is a portable power station with a 1,248 Wh lithium iron phosphate battery rated for 3,000 cycles to 80 percent capacity. It has two 230 V AC sockets with 1,200 W continuous and 2,400 W surge output, two 100 W USB-C ports, two USB-A ports and a 12 V car socket. A 1,200 W kettle runs for roughly 50 minutes, and a 60 W fridge for about 18 hours.",
                "queries": [
                    "What is the battery capacity of the Harbor P12?",
                    "How many charge cycles will the power station battery last?",
                    "Can the Harbor P12 run an electric kettle?",
                    "How many AC sockets does the power station have?",
                    "How long will it power a small camping fridge?",
                ],
            },
            {
                "text": "Charge the Harbor P12 to 100 percent before first use. Plug the supplied AC cable into the AC IN port on the side; a full charge from a wall socket takes 1.5 hours. You can also charge it from solar panels of 12 to 60 V and up to 500 W through the yellow XT60 port, which takes about 3 hours in full sun, or from a car socket in about 12 hours.",
                "queries": [
                    "How long does it take to charge the Harbor P12 from the wall?",
                    "Can I charge the power station with solar panels?",
                    "What is the maximum solar input of the Harbor P12?",
                    "Which port do the solar panels plug into?",
                    "Can I recharge the power station from my car?",
                ],
            },
            {
                "text": "Press the main Power button to wake the Harbor P12 display, then press the AC, USB or DC button to switch each group of outputs on; a button glows white while its group is on. The display shows the remaining percentage, input and output watts and the estimated hours left. Hold the display button for 3 seconds to turn on the side LED lamp, and press again to cycle through bright, dim and SOS. Outputs switch off after 12 hours with no load.",
                "queries": [
                    "How do I turn on the AC sockets of the Harbor P12?",
                    "How can I see how much running time is left?",
                    "Does the Harbor P12 have a built-in light?",
                    "Why did my outputs switch off by themselves?",
                    "What does the white glow on the AC button mean?",
                ],
            },
            {
                "text": "If the Harbor P12 shows error code E01, the load is more than 1,200 W; unplug the device and press the AC button again. E03 means the unit is too hot, so move it to a shaded, ventilated spot and let it cool. For storage, charge it to 60 percent and top it up every 3 months. To reset the system, hold the Power and USB buttons together for 10 seconds.",
                "queries": [
                    "What does error E01 mean on the Harbor P12?",
                    "What does E03 on the power station display mean?",
                    "What charge level should the power station be stored at?",
                    "How often should I top up the battery when it is in storage?",
                    "How do I reset the Harbor P12?",
                ],
            },
            {
                "text": "The Harbor P12 has a 5-year warranty, weighs 14.5 kg and has two fold-flat handles. It is not waterproof, so keep it out of the rain and away from pools. Do not connect life-support medical equipment to it. Most airlines will not carry it because it exceeds 160 Wh, and you can email support@harborpower.example for help.",
                "queries": [
                    "How long is the Harbor P12 warranty?",
                    "Can I take the power station on a plane?",
                    "Is the Harbor P12 waterproof?",
                    "How much does the Harbor P12 weigh?",
                    "Is it safe to power life-support equipment from it?",
                ],
            },
        ],
    },
    {
        "slug": "stitchline-s40-sewing-machine",
        "title": "Stitchline S40 Sewing Machine: User Manual",
        "paragraphs": [
            {
                "text": "The Stitchline S40 is a computerised sewing machine with 40 built-in stitches, including 6 one-step buttonholes. It sews up to 850 stitches per minute, with stitch widths up to 7 mm and lengths up to 5 mm. It comes with 8 presser feet, a top drop-in bobbin system and an automatic needle threader. The Stitchline S40 also has a free arm for sleeves and trouser hems.",
                "queries": [
                    "How many stitches does the Stitchline S40 have?",
                    "How fast does the sewing machine sew?",
                    "What is the maximum stitch width?",
                    "How many presser feet come with the Stitchline S40?",
                    "Can I hem sleeves on the Stitchline S40?",
                ],
            },
            {
                "text": "To thread the Stitchline S40, raise the presser foot and turn the handwheel towards you until the needle is at its highest point. Follow the numbered guides 1 to 5 on the machine, then pull down the threader lever to pass the thread through the needle eye. Wind a bobbin on the pin on top, drop it in with the thread running anticlockwise and close the clear cover.",
                "queries": [
                    "How do I thread the Stitchline S40?",
                    "Which way should the bobbin thread run?",
                    "How do I use the needle threader?",
                    "Which direction should I turn the handwheel?",
                    "Where do I wind a bobbin on the Stitchline S40?",
                ],
            },
            {
                "text": "Select a stitch on the Stitchline S40 by typing its two-digit number on the keypad; the LCD shows the number with its default width and length. The Start/Stop button lets you sew without the foot pedal, and the speed slider sets the pace. Press Reverse to sew backwards and lock the seam. The Needle Up/Down button sets where the needle stops, and a red light on it means the needle will stop down.",
                "queries": [
                    "How do I choose a stitch on the Stitchline S40?",
                    "Can I sew without using the foot pedal?",
                    "How do I sew in reverse to lock a seam?",
                    "What does the red light on the Needle Up/Down button mean?",
                    "How do I slow the sewing machine down?",
                ],
            },
            {
                "text": "After every project, brush lint out of the Stitchline S40 bobbin area with the small brush supplied; remove the needle plate with the screwdriver to reach the feed dogs. Change the needle every 8 hours of sewing or after hitting a pin. If thread bunches under the fabric, rethread the top thread with the presser foot up. If the LCD shows E1, the bobbin winder is still pushed right; move it back to the left.",
                "queries": [
                    "Why is thread bunching under my fabric?",
                    "How often should I change the sewing machine needle?",
                    "What does E1 on the Stitchline S40 screen mean?",
                    "How do I clean lint out of the bobbin area?",
                    "How do I take off the needle plate?",
                ],
            },
            {
                "text": "The Stitchline S40 has a 25-year warranty on the chassis, 5 years on electronics and 1 year on labour. The machine weighs 6.8 kg and comes with a soft dust cover. It runs on 220-240 V and draws 60 W; turn it off at the power switch before changing needles or presser feet. Children under 14 should only use it with supervision, and you can call Stitchline on 0800 555 0177.",
                "queries": [
                    "How long is the Stitchline S40 chassis warranty?",
                    "How heavy is the sewing machine?",
                    "Should I switch off the machine before changing the presser foot?",
                    "What is the power consumption of the Stitchline S40?",
                    "Can children use the sewing machine?",
                ],
            },
        ],
    },
]
